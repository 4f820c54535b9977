package procgroup

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// groupGone says whether no process is left in the group pgid.
func groupGone(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

// The attack: a server that forks a child which ignores SIGTERM. The
// group must be gone after the subtest's cleanup all the same.
func TestStartStopsTheWholeGroup(t *testing.T) {
	var pgid int
	log := filepath.Join(t.TempDir(), "sh.log")
	t.Run("server", func(t *testing.T) {
		cmd := exec.Command("sh", "-c", `(trap "" TERM; sleep 300) & echo started; wait`)
		p := Start(t, cmd, Options{Name: "sh", Log: log, Grace: 2 * time.Second})
		pgid = cmd.Process.Pid
		deadline := time.Now().Add(time.Minute)
		for !strings.Contains(TailFile(log, 1), "started") {
			if time.Now().After(deadline) || p.Exited() {
				t.Fatalf("the server did not start: %s", TailFile(log, 5))
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	deadline := time.Now().Add(time.Minute)
	for !groupGone(pgid) {
		if time.Now().After(deadline) {
			t.Fatalf("process group %d outlived its test's cleanup", pgid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCommandKillsTheGroupOnTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	cmd := Command(t, ctx, "sh", "-c", `sleep 300 & wait`)
	start := time.Now()
	if err := cmd.Run(); err == nil {
		t.Fatal("a command past its deadline ran to the end")
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("the command ran %s past a 200ms deadline", d)
	}
	deadline := time.Now().Add(time.Minute)
	for !groupGone(cmd.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the group of a timed-out command outlived it")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLastLines(t *testing.T) {
	if got := LastLines("a\nb\nc\n", 2); got != "b\nc" {
		t.Errorf("LastLines = %q", got)
	}
}
