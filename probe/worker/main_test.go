package worker

import (
	"os"
	"testing"
)

// workerEnv makes the test binary act as `plateau_exporter probe-worker`,
// so ProcessRunner is tested with a real child process.
const workerEnv = "PLATEAU_TEST_AS_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		if err := Main(os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
