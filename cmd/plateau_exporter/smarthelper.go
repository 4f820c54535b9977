package main

import (
	"fmt"
	"os"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"

	"github.com/plateau-exporter/plateau_exporter/collector"
	"github.com/plateau-exporter/plateau_exporter/internal/privsep"
)

// dropPrivileges runs before the daemon does anything else. A daemon that
// runs as a user other than root with capabilities (the packaged unit gives
// user plateau CAP_SYS_ADMIN for the NVMe SMART log) starts the SMART
// keeper with CAP_SYS_ADMIN, then re-executes itself with every capability
// set empty; the new image finds the keeper through
// --collector.nvme.smart-helper-fd. It returns only when there is nothing
// to drop, or when re-executing failed.
//
// As root nothing is separated: root regains the full set on every execve
// (probe workers, GPFS commands), so dropping the daemon's own sets would
// protect nothing. The unit runs the daemon as plateau.
func dropPrivileges(logger log.Logger, logLevel, logFormat string) error {
	if os.Geteuid() == 0 {
		level.Debug(logger).Log("msg", "running as root: capabilities are not separated (the packaged unit runs as user plateau)")
		return nil
	}
	caps, err := privsep.Self()
	if err != nil {
		return fmt.Errorf("reading capabilities: %w", err)
	}
	// The marker tells the new image that it is one; it is not passed on
	// to probe workers and commands.
	reexecuted := os.Getenv(reexecMarker) != ""
	os.Unsetenv(reexecMarker)
	if caps.Empty() {
		return nil
	}
	if reexecuted {
		// Only file capabilities on the binary give them back across
		// execve; re-executing again would loop.
		return exitErr(2, fmt.Errorf("capabilities held after re-executing without them (%s): does the binary carry file capabilities? Remove them (setcap -r); the unit grants CAP_SYS_ADMIN", caps))
	}
	args := os.Args
	logArgs := []string{"--log.level=" + logLevel, "--log.format=" + logFormat}
	switch {
	case caps.Permitted&privsep.MaskSysAdmin == 0:
	case !collector.NVMeCollectorEnabled():
		level.Info(logger).Log("msg", "NVMe collector disabled: no SMART helper; dropping CAP_SYS_ADMIN")
	default:
		fd, err := collector.StartSMARTKeeper(logger, logArgs)
		if err != nil {
			level.Warn(logger).Log("msg", "SMART helper not started; plateau_nvme_smart_available is 0", "err", err)
			break
		}
		args = append(args[:len(args):len(args)], fmt.Sprintf("--collector.nvme.smart-helper-fd=%d", fd))
	}
	level.Info(logger).Log("msg", "dropping every capability: re-executing", "capabilities", caps)
	return privsep.ExecWithout("/proc/self/exe", args, append(os.Environ(), reexecMarker+"=1"))
}

// reexecMarker is set in the environment of the daemon's image without
// capabilities.
const reexecMarker = "PLATEAU_EXPORTER_CAPS_DROPPED"

// runSMARTHelper is the hidden smart-helper command.
func runSMARTHelper(role string, logger log.Logger, logLevel, logFormat string) error {
	return collector.SMARTHelperMain(role, logger, []string{"--log.level=" + logLevel, "--log.format=" + logFormat})
}
