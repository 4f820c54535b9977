package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/alecthomas/kingpin/v2"

	"github.com/plateau-exporter/plateau_exporter/internal/backtestcli"
)

// backtestBinary is the binary that runs backtest. The PromQL engine the
// backtest evaluates rules with is in that binary only: this one is
// resident on every node of a cluster, and linking the engine made the idle
// daemon's resident memory 3 MiB larger (16.9 MiB instead of 14.0, against
// node_exporter's 15.4, bench/noise.sh).
const backtestBinary = "plateau_backtest"

// backtestCommand declares backtest on app, with the flags plateau_backtest
// reads, so that --help and the man page document them and kingpin checks
// them here; running it hands the arguments to plateau_backtest.
func backtestCommand(app *kingpin.Application) (*kingpin.CmdClause, func(args []string) error) {
	cmd := app.Command("backtest", backtestcli.Help+" Run by "+backtestBinary+", installed beside plateau_exporter or in ../libexec/plateau_exporter/ from it.")
	backtestcli.Declare(cmd)
	return cmd, execBacktest
}

// execBacktest replaces this process with plateau_backtest, given the
// arguments after the command's name: its output, exit status and signals
// are the command's.
func execBacktest(args []string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("backtest: where is plateau_exporter: %w", err)
	}
	path, err := findBacktestBinary(self)
	if err != nil {
		return err
	}
	err = syscall.Exec(path, append([]string{path}, args...), os.Environ())
	return fmt.Errorf("backtest: exec %s: %w", path, err)
}

// findBacktestBinary looks for plateau_backtest beside the binary at self
// (a build tree, a tarball), then in ../libexec/plateau_exporter/ from it
// (the RPM), then on $PATH.
func findBacktestBinary(self string) (string, error) {
	if resolved, err := filepath.EvalSymlinks(self); err == nil {
		self = resolved
	}
	dir := filepath.Dir(self)
	candidates := []string{
		filepath.Join(dir, backtestBinary),
		filepath.Join(dir, "..", "libexec", "plateau_exporter", backtestBinary),
	}
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return c, nil
		}
	}
	if p, err := exec.LookPath(backtestBinary); err == nil {
		return p, nil
	} else if !errors.Is(err, exec.ErrNotFound) && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("backtest: %w", err)
	}
	return "", fmt.Errorf("backtest is run by %s, which is neither at %s nor at %s nor on $PATH (make build builds both binaries; the RPM installs it in /usr/libexec/plateau_exporter/; from the source tree, go run ./cmd/plateau_backtest takes the same arguments)",
		backtestBinary, candidates[0], candidates[1])
}
