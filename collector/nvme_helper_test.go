package collector

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/common/expfmt"
	"golang.org/x/sys/unix"
)

func TestValidControllerName(t *testing.T) {
	for name, want := range map[string]bool{
		"nvme0": true, "nvme12": true, "nvme99999": true,
		"": false, "nvme": false, "nvme0n1": false, "nvme-fabrics": false, "nvme123456": false,
		"NVME0": false, "../nvme0": false, "nvme0/": false, "nvme0\x00": false, " nvme0": false, "nvme٣": false,
	} {
		if got := validControllerName(name); got != want {
			t.Errorf("validControllerName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestSMARTRequestRoundTrip(t *testing.T) {
	in := smartRequest{id: 0xdeadbeef, timeout: 2500 * time.Millisecond, name: "nvme17"}
	b, err := encodeSMARTRequest(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != smartRequestSize || string(b[:4]) != "PSRQ" || b[4] != 1 || b[5] != 1 {
		t.Fatalf("encoded request % x", b)
	}
	out, status, err := parseSMARTRequest(b)
	if err != nil || status != smartOK || out != in {
		t.Fatalf("parse(encode(%+v)) = %+v, %v, %v", in, out, status, err)
	}
	for _, bad := range []smartRequest{
		{id: 1, timeout: time.Second, name: "nvme0n1"},
		{id: 1, timeout: 0, name: "nvme0"},
		{id: 1, timeout: time.Minute + time.Millisecond, name: "nvme0"},
	} {
		if _, err := encodeSMARTRequest(bad); err == nil {
			t.Errorf("encodeSMARTRequest(%+v) succeeded", bad)
		}
	}
}

func TestParseSMARTRequestMalformed(t *testing.T) {
	good, err := encodeSMARTRequest(smartRequest{id: 7, timeout: time.Second, name: "nvme0"})
	if err != nil {
		t.Fatal(err)
	}
	with := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for name, tc := range map[string]struct {
		b      []byte
		status smartStatus
	}{
		"empty":           {nil, smartMalformed},
		"short":           {good[:31], smartMalformed},
		"long":            {append(append([]byte(nil), good...), 0), smartMalformed},
		"magic":           {with(func(b []byte) []byte { b[0] = 'X'; return b }), smartMalformed},
		"version 2":       {with(func(b []byte) []byte { b[4] = 2; return b }), smartMalformed},
		"op 2":            {with(func(b []byte) []byte { b[5] = 2; return b }), smartMalformed},
		"reserved":        {with(func(b []byte) []byte { b[7] = 1; return b }), smartMalformed},
		"timeout 0":       {with(func(b []byte) []byte { copy(b[12:16], []byte{0, 0, 0, 0}); return b }), smartMalformed},
		"timeout huge":    {with(func(b []byte) []byte { copy(b[12:16], []byte{0xff, 0xff, 0xff, 0xff}); return b }), smartMalformed},
		"name length 0":   {with(func(b []byte) []byte { b[16] = 0; return b }), smartMalformed},
		"name length 16":  {with(func(b []byte) []byte { b[16] = 16; return b }), smartMalformed},
		"padding":         {with(func(b []byte) []byte { b[31] = 'x'; return b }), smartMalformed},
		"namespace":       {with(func(b []byte) []byte { b[16] = 7; copy(b[17:], "nvme0n1"); return b }), smartBadName},
		"path":            {with(func(b []byte) []byte { b[16] = 8; copy(b[17:], "../nvme0"); return b }), smartBadName},
		"NUL in the name": {with(func(b []byte) []byte { b[16] = 6; return b }), smartBadName},
	} {
		r, status, err := parseSMARTRequest(tc.b)
		if err == nil || status != tc.status {
			t.Errorf("%s: parse = %v, %v; want status %v and an error", name, status, err, tc.status)
		}
		if len(tc.b) == smartRequestSize && r.id != 7 {
			t.Errorf("%s: id %d not kept for the error reply", name, r.id)
		}
	}
}

func FuzzParseSMARTRequest(f *testing.F) {
	good, _ := encodeSMARTRequest(smartRequest{id: 7, timeout: time.Second, name: "nvme0"})
	f.Add(good)
	f.Add(good[:16])
	f.Add([]byte("PSRQ\x01\x01\x00\x00"))
	f.Add(bytes.Repeat([]byte{0xff}, smartRequestSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, status, err := parseSMARTRequest(b)
		if err != nil {
			if status == smartOK {
				t.Fatalf("error %v with status ok", err)
			}
			return
		}
		if !validControllerName(r.name) {
			t.Fatalf("accepted name %q", r.name)
		}
		again, err := encodeSMARTRequest(r)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("request % x parsed to %+v re-encodes as % x (%v)", b, r, again, err)
		}
	})
}

func TestSMARTReplyRoundTrip(t *testing.T) {
	log := bytes.Repeat([]byte{0xab}, smartLogSize)
	r, err := parseSMARTReply(encodeSMARTReply(smartReply{id: 3, status: smartOK, payload: log}))
	if err != nil || r.id != 3 || !bytes.Equal(r.payload, log) || r.err() != nil {
		t.Fatalf("ok reply: %+v, %v", r, err)
	}
	r, err = parseSMARTReply(encodeSMARTReply(smartReply{id: 4, status: smartOpenFailed, errno: unix.EACCES, payload: []byte(strings.Repeat("x", 1000))}))
	if err != nil || len(r.payload) != smartMaxMessage || !errors.Is(r.err(), unix.EACCES) {
		t.Fatalf("error reply: %+v, %v, %v", r, err, r.err())
	}
	if _, err := parseSMARTReply(encodeSMARTReply(smartReply{id: 5, status: smartOK, payload: log[:10]})); err == nil {
		t.Fatal("an ok reply with a short log was accepted")
	}
}

func TestKeeperMsgRoundTrip(t *testing.T) {
	m, err := parseKeeperMsg(encodeKeeperMsg(keeperMsg{op: keeperFailed, pid: 42, msg: "no"}))
	if err != nil || m.op != keeperFailed || m.pid != 42 || m.msg != "no" {
		t.Fatalf("%+v, %v", m, err)
	}
	for _, b := range [][]byte{nil, []byte("PSKP\x01\x01"), append([]byte("PSKP\x02\x01"), make([]byte, 10)...)} {
		if _, err := parseKeeperMsg(b); err == nil {
			t.Errorf("parseKeeperMsg(% x) succeeded", b)
		}
	}
}

// connPair is a connected SOCK_SEQPACKET pair as the helpers use.
func connPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	a, b := mustSeqpacketPair(t)
	ca, cb := mustUnixConn(t, a, "a"), mustUnixConn(t, b, "b")
	t.Cleanup(func() { ca.Close(); cb.Close() })
	return ca, cb
}

// mustSeqpacketPair is seqpacketPair, failing the test on its error.
func mustSeqpacketPair(t *testing.T) (a, b int) {
	t.Helper()
	a, b, err := seqpacketPair()
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

// mustUnixConn is unixConnFromFD, failing the test on its error.
func mustUnixConn(t *testing.T, fd int, name string) *net.UnixConn {
	t.Helper()
	c, err := unixConnFromFD(fd, name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func fakeSMARTRead(log []byte) func(string, time.Duration) ([]byte, smartStatus, error) {
	return func(name string, _ time.Duration) ([]byte, smartStatus, error) {
		if name == "nvme0" {
			return log, smartOK, nil
		}
		return nil, smartOpenFailed, fmt.Errorf("opening /dev/%s: %w", name, unix.ENOENT)
	}
}

func roundTrip(t *testing.T, c *net.UnixConn, msg []byte) smartReply {
	t.Helper()
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, smartMaxReplySize+1)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	r, err := parseSMARTReply(buf[:n])
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A malformed request gets an error reply and the server goes on serving.
func TestSMARTServerAnswersMalformedRequests(t *testing.T) {
	daemon, helper := connPair(t)
	log := readSMARTFixture(t, "smart-healthy.hex")
	done := make(chan error, 1)
	go func() { done <- (&smartServer{logger: logNop(), read: fakeSMARTRead(log)}).serve(helper) }()

	garbage := append([]byte("PSRQ\x09\x01\x00\x00\x05\x00\x00\x00"), make([]byte, 20)...)
	if r := roundTrip(t, daemon, garbage); r.status != smartMalformed || r.id != 5 {
		t.Errorf("version 9 request: %+v", r)
	}
	if r := roundTrip(t, daemon, bytes.Repeat([]byte{'A'}, 100)); r.status != smartMalformed {
		t.Errorf("oversized request: %+v", r)
	}
	bad := make([]byte, smartRequestSize)
	copy(bad, smartRequestMagic[:])
	bad[4], bad[5], bad[12], bad[16] = 1, 1, 100, 4
	copy(bad[17:], "/etc")
	if r := roundTrip(t, daemon, bad); r.status != smartBadName {
		t.Errorf("request for /etc: %+v", r)
	}
	req, _ := encodeSMARTRequest(smartRequest{id: 9, timeout: time.Second, name: "nvme0"})
	if r := roundTrip(t, daemon, req); r.status != smartOK || r.id != 9 || !bytes.Equal(r.payload, log) {
		t.Errorf("good request after bad ones: status %v id %d", r.status, r.id)
	}
	req, _ = encodeSMARTRequest(smartRequest{id: 10, timeout: time.Second, name: "nvme3"})
	if r := roundTrip(t, daemon, req); r.status != smartOpenFailed || !errors.Is(r.err(), unix.ENOENT) {
		t.Errorf("missing controller: %+v (%v)", r, r.err())
	}
	daemon.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("server ended with %v when the daemon closed its socket", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("server did not end when the daemon closed its socket")
	}
}

func logNop() log.Logger { return log.NewNopLogger() }

// readSMARTLogAt refuses what is not a controller character device, and
// does not block on a FIFO.
func TestReadSMARTLogAtRefusesNonDevices(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("/dev/null", filepath.Join(dir, "nvme0")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nvme1"), make([]byte, 512), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "nvme2"), 0o644); err != nil {
		t.Fatal(err)
	}
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	for name, want := range map[string]error{"nvme0": unix.ELOOP, "nvme1": unix.ENODEV, "nvme2": unix.ENODEV, "nvme3": unix.ENOENT} {
		_, status, err := readSMARTLogAt(dfd, dir, name, time.Second)
		if status != smartOpenFailed || !errors.Is(err, want) {
			t.Errorf("%s: status %v, err %v; want %v", name, status, err, want)
		}
	}
	if _, status, _ := readSMARTLogAt(dfd, dir, "../nvme0", time.Second); status != smartBadName {
		t.Errorf("../nvme0: status %v", status)
	}
}

// fakeKeeper answers start requests on control with in-process servers and
// counts them; kill ends the current one as a crash would.
type fakeKeeper struct {
	t       *testing.T
	control *net.UnixConn
	read    func(string, time.Duration) ([]byte, smartStatus, error)

	mu      sync.Mutex
	started int
	current *net.UnixConn
}

func (k *fakeKeeper) run() {
	buf := make([]byte, 512)
	for {
		n, err := k.control.Read(buf)
		if err != nil {
			return
		}
		if m, err := parseKeeperMsg(buf[:n]); err != nil || m.op != keeperOpStart {
			k.t.Errorf("keeper got %q (%v)", buf[:n], err)
			return
		}
		mine, theirs, err := seqpacketPair()
		if err != nil {
			k.t.Error(err)
			return
		}
		srv, err := unixConnFromFD(theirs, "server")
		if err != nil {
			k.t.Error(err)
			return
		}
		k.mu.Lock()
		k.started++
		k.current = srv
		pid := 1000 + k.started
		k.mu.Unlock()
		go func() { _ = (&smartServer{logger: logNop(), read: k.read}).serve(srv) }()
		_, _, err = k.control.WriteMsgUnix(encodeKeeperMsg(keeperMsg{op: keeperStarted, pid: uint32(pid)}), unix.UnixRights(mine), nil)
		unix.Close(mine)
		if err != nil {
			return
		}
	}
}

func (k *fakeKeeper) kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.current.Close()
}

// startFakeKeeper runs a fake keeper whose servers answer with read, and
// a client of it; both are closed when the test ends.
func startFakeKeeper(t *testing.T, read func(string, time.Duration) ([]byte, smartStatus, error)) (*fakeKeeper, *smartHelperClient) {
	t.Helper()
	a, b := mustSeqpacketPair(t)
	control := mustUnixConn(t, b, "keeper")
	k := &fakeKeeper{t: t, control: control, read: read}
	go k.run()
	c, err := newSMARTHelperClient(a, logNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		control.Close()
	})
	return k, c
}

func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The client restarts a server that died; while none runs, a read fails at
// once instead of waiting.
func TestSMARTHelperClientRestartsServer(t *testing.T) {
	log := readSMARTFixture(t, "smart-healthy.hex")
	k, c := startFakeKeeper(t, fakeSMARTRead(log))

	pollUntil(t, "the first server runs", func() bool { return c.running() == 1001 })
	got, err := c.read("nvme0", time.Second)
	if err != nil || !bytes.Equal(got, log) {
		t.Fatalf("read through the helper: %v", err)
	}
	if _, err := c.read("nvme1", time.Second); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("read of a missing controller: %v", err)
	}

	k.kill()
	pollUntil(t, "the client sees the server gone", func() bool { return c.running() != 1001 })
	if pid := c.running(); pid == 0 {
		start := time.Now()
		if _, err := c.read("nvme0", 10*time.Second); !errors.Is(err, errSMARTHelperDown) {
			t.Errorf("read while down: %v", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("read while down took %s", d)
		}
	}
	pollUntil(t, "a second server runs", func() bool { return c.running() == 1002 })
	if _, err := c.read("nvme0", time.Second); err != nil {
		t.Fatalf("read after the restart: %v", err)
	}
}

// The collector reports SMART metrics read through the helper.
func TestNVMeCollectorThroughHelper(t *testing.T) {
	k, h := startFakeKeeper(t, fakeSMARTRead(readSMARTFixture(t, "smart-healthy.hex")))
	pollUntil(t, "the server runs", func() bool { return h.running() != 0 })

	c := newTestNVMe(t, t.TempDir(), nil)
	c.readSMART = h.read
	c.helperRunning = func() bool { return h.running() != 0 }
	gather := func() string {
		mfs, err := newTestRegistry("nvme", c, nil).Gather()
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		for _, mf := range mfs {
			if _, err := expfmt.MetricFamilyToText(&out, mf); err != nil {
				t.Fatal(err)
			}
		}
		return out.String()
	}
	text := gather()
	if !strings.Contains(text, "plateau_nvme_smart_helper_up 1") {
		t.Errorf("helper running, but not up:\n%s", text)
	}
	if !strings.Contains(text, `plateau_nvme_smart_available{device="nvme0"} 1`) || !strings.Contains(text, `plateau_nvme_temperature_celsius{device="nvme0"}`) {
		t.Errorf("nvme0 has no SMART data through the helper:\n%s", text)
	}
	if strings.Contains(text, `plateau_nvme_smart_available{device="nvme1"} 1`) {
		t.Errorf("nvme1 has SMART data although the helper failed it:\n%s", text)
	}
	// A dead server reads 0 until the keeper starts another.
	k.kill()
	pollUntil(t, "the client sees the server gone", func() bool { return h.running() == 0 || h.running() != 1001 })
	if h.running() == 0 {
		if text := gather(); !strings.Contains(text, "plateau_nvme_smart_helper_up 0") {
			t.Errorf("helper down, but not 0:\n%s", text)
		}
	}
	pollUntil(t, "a second server runs", func() bool { return h.running() == 1002 })
	if text := gather(); !strings.Contains(text, "plateau_nvme_smart_helper_up 1") {
		t.Errorf("helper restarted, but not up:\n%s", text)
	}
}
