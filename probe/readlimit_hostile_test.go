package probe

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A FIFO where a file should be is refused at once, not read forever.
func TestReadFileLimitedFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "history.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := ReadFileLimited(fifo, 1<<20); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") || !strings.Contains(err.Error(), fifo) {
			t.Errorf("FIFO: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reading a FIFO hung")
	}
}

// A file over the limit is refused by its size, sparse or not, naming it.
func TestReadFileLimitedTooLarge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "baselines.yml")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 100<<20); err != nil {
		t.Fatal(err)
	}
	_, err := ReadFileLimited(path, MaxBaselinesBytes)
	if !errors.Is(err, ErrFileTooLarge) || !strings.Contains(err.Error(), path) {
		t.Errorf("100 MB file: %v", err)
	}
	if err := os.Truncate(path, 10); err != nil {
		t.Fatal(err)
	}
	if data, err := ReadFileLimited(path, 10); err != nil || len(data) != 10 {
		t.Errorf("file at the limit: %d bytes, %v", len(data), err)
	}
	if _, err := ReadFileLimited(t.TempDir(), 10); !errors.Is(err, syscall.EISDIR) {
		t.Errorf("directory: %v", err)
	}
}
