package collector

import (
	"encoding/binary"
	"fmt"
	"math"
)

// smartLogSize is the size of the SMART / Health Information log page.
const smartLogSize = 512

// smartLog is the SMART / Health Information log page (log identifier 02h)
// of an NVMe controller. Byte offsets are those of the NVM Express Base
// Specification 2.0, figure "SMART / Health Information Log Page"; all
// fields are little endian. The 128-bit counters are kept as float64, the
// type they are exported as: above 2^53 they lose precision in the last
// digits, which a rate does not notice.
type smartLog struct {
	criticalWarning         uint8     // byte 0, bit field
	temperatureKelvin       uint16    // bytes 2:1, composite temperature
	availableSpare          uint8     // byte 3, percent
	availableSpareThreshold uint8     // byte 4, percent
	percentageUsed          uint8     // byte 5, percent of rated endurance, may exceed 100
	dataUnitsRead           float64   // bytes 47:32, thousands of 512-byte units
	dataUnitsWritten        float64   // bytes 63:48
	hostReadCommands        float64   // bytes 79:64
	hostWriteCommands       float64   // bytes 95:80
	controllerBusyMinutes   float64   // bytes 111:96
	powerCycles             float64   // bytes 127:112
	powerOnHours            float64   // bytes 143:128
	unsafeShutdowns         float64   // bytes 159:144
	mediaErrors             float64   // bytes 175:160, unrecovered data integrity errors
	errorLogEntries         float64   // bytes 191:176
	warningTempMinutes      uint32    // bytes 195:192, time above the warning threshold
	criticalTempMinutes     uint32    // bytes 199:196, time above the critical threshold
	sensorKelvin            [8]uint16 // bytes 215:200, 0 when not implemented
}

// dataUnitBytes is the size of one SMART data unit: 1000 units of 512 bytes.
const dataUnitBytes = 512 * 1000

// parseSMARTLog decodes a SMART / Health Information log page.
func parseSMARTLog(b []byte) (smartLog, error) {
	var l smartLog
	if len(b) != smartLogSize {
		return l, fmt.Errorf("SMART log is %d bytes, want %d", len(b), smartLogSize)
	}
	le := binary.LittleEndian
	u128 := func(off int) float64 {
		return float64(le.Uint64(b[off+8:off+16]))*math.Exp2(64) + float64(le.Uint64(b[off:off+8]))
	}
	l.criticalWarning = b[0]
	l.temperatureKelvin = le.Uint16(b[1:3])
	l.availableSpare = b[3]
	l.availableSpareThreshold = b[4]
	l.percentageUsed = b[5]
	l.dataUnitsRead = u128(32)
	l.dataUnitsWritten = u128(48)
	l.hostReadCommands = u128(64)
	l.hostWriteCommands = u128(80)
	l.controllerBusyMinutes = u128(96)
	l.powerCycles = u128(112)
	l.powerOnHours = u128(128)
	l.unsafeShutdowns = u128(144)
	l.mediaErrors = u128(160)
	l.errorLogEntries = u128(176)
	l.warningTempMinutes = le.Uint32(b[192:196])
	l.criticalTempMinutes = le.Uint32(b[196:200])
	for i := range l.sensorKelvin {
		l.sensorKelvin[i] = le.Uint16(b[200+2*i:])
	}
	return l, nil
}

// kelvinToCelsius converts the integer kelvins the log reports. Working in
// hundredths keeps the result the closest float64 to the exact value
// (309 K is 35.85, not 35.85000000000002).
func kelvinToCelsius(k uint16) float64 {
	return (float64(k)*100 - 27315) / 100
}
