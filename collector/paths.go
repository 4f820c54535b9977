package collector

import (
	"path/filepath"

	"github.com/alecthomas/kingpin/v2"
)

// Mount points of the kernel's pseudo file systems; tests point them at
// fixture trees under collector/fixtures.
var (
	procPath = kingpin.Flag("path.procfs", "procfs mountpoint.").Default("/proc").String()
	sysPath  = kingpin.Flag("path.sysfs", "sysfs mountpoint.").Default("/sys").String()
)

func procFilePath(name ...string) string {
	return filepath.Join(append([]string{*procPath}, name...)...)
}

func sysFilePath(name ...string) string {
	return filepath.Join(append([]string{*sysPath}, name...)...)
}
