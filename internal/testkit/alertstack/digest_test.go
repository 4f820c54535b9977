package alertstack

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// digestChildEnv makes TestFailureDigestChild fail on purpose, in the
// child process TestFailureDigestIsTheLastThingPrinted runs.
const digestChildEnv = "PLATEAU_ALERTSTACK_DIGEST_CHILD"

// TestFailureDigestIsTheLastThingPrinted fails a test the way a stack
// test fails, in a child process, and reads its output as CI keeps it:
// the digest must come after the logs the other cleanups print, right
// before "--- FAIL", and name each failure and the last step.
func TestFailureDigestIsTheLastThingPrinted(t *testing.T) {
	out, lines, fail := runFailingChild(t, "1")
	// What CI's record of a failure keeps: the lines just before it.
	kept := strings.Join(lines[max(0, fail-digestLines-3):fail], "\n")
	for _, want := range []string{
		"FAILED, repeated after the logs above: 3 check(s) failed",
		"the webhook received a page it should not have",
		"a description over two lines [...]",
		"timed out after 50ms waiting for the page to resolve (last error: Prometheus still holds it)",
		"last step: t+",
		"TEST: phase (b): every node throttled",
		"scrapes of the daemons since t+0: 2 of 900 failed",
	} {
		if !strings.Contains(kept, want) {
			t.Errorf("the last lines before --- FAIL lack %q:\n%s\n(whole output:\n%s)", want, kept, out)
		}
	}
	if strings.Contains(kept, "second line of it") {
		t.Errorf("the digest printed a failure over more than one line:\n%s", kept)
	}
	logTail := strings.Index(out, "last lines of a process's log")
	digest := strings.Index(out, "FAILED, repeated")
	if logTail < 0 || digest < logTail {
		t.Errorf("the digest (at byte %d) does not follow the process log printed by a later cleanup (at byte %d):\n%s", digest, logTail, out)
	}
}

// TestFailureDigestOfAStep: a test stopped by a step's t.Fatal, which
// the stack does not record, still ends with a digest that says so.
func TestFailureDigestOfAStep(t *testing.T) {
	_, lines, fail := runFailingChild(t, "step")
	if kept := strings.Join(lines[max(0, fail-4):fail], "\n"); !strings.Contains(kept, "FAILED, by a step the stack does not record: its message is above") {
		t.Errorf("the lines before --- FAIL do not say a step failed:\n%s", kept)
	}
}

// runFailingChild runs TestFailureDigestChild in a child process in mode,
// requires it to fail, and returns its output, the output's lines and
// the index of its "--- FAIL" line.
func runFailingChild(t *testing.T, mode string) (out string, lines []string, fail int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFailureDigestChild$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), digestChildEnv+"="+mode)
	b, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("the child test should fail and exit non-zero; err %v, output:\n%s", err, b)
	}
	lines = strings.Split(string(b), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "--- FAIL: TestFailureDigestChild") {
			return string(b), lines, i
		}
	}
	t.Fatalf("no --- FAIL line in the child's output:\n%s", b)
	return "", nil, 0
}

// TestFailureDigestChild is the failing test the tests above read; it
// runs only in their child process.
func TestFailureDigestChild(t *testing.T) {
	mode := os.Getenv(digestChildEnv)
	if mode == "" {
		t.Skip("fails on purpose; run by TestFailureDigestIsTheLastThingPrinted")
	}
	s := &Stack{Start: time.Now()}
	s.ReportFailuresLast(t)
	if mode == "step" {
		t.Fatal("writing a cgroup file: permission denied")
	}
	// Registered after the digest, as the stack's processes are: it runs
	// first and prints its log, which the digest must follow.
	t.Cleanup(func() {
		t.Log("last lines of a process's log:\n" + strings.Repeat("level=debug msg=\"probe done\"\n", 40))
	})
	s.timeline = &Timeline{s: s}
	s.timeline.Mark(t, "phase (a): one node throttled")
	s.timeline.Mark(t, "phase (b): every node throttled")
	s.timeline.Add(t, time.Now(), "Prometheus: PlateauProbeRegression firing")
	s.noteForDigest("scrapes of the daemons since t+0: 2 of 900 failed")
	s.Errorf(t, "the webhook received a page it should not have")
	s.Errorf(t, "a description over two lines\nsecond line of it")
	s.WaitFor(t, "the page to resolve", 50*time.Millisecond, func() (bool, error) {
		return false, errors.New("Prometheus still holds it")
	})
	t.Error("not reached: WaitFor's time-out stops the test")
}
