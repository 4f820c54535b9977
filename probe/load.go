package probe

import (
	"bytes"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
)

//go:embed default.yml
var embeddedDefault []byte

// EmbeddedDefaultYAML returns the built-in config text, with the temp
// directory filled in.
func EmbeddedDefaultYAML() []byte {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("plateau_exporter-%d", os.Geteuid()))
	return bytes.ReplaceAll(embeddedDefault, []byte("@TEMPDIR@"), []byte(path))
}

// LoadEmbedded parses the built-in default config.
func LoadEmbedded() (*Config, error) {
	cfg, err := ParseConfig(EmbeddedDefaultYAML(), EmbeddedSource)
	if err != nil {
		return nil, err
	}
	for _, t := range cfg.Targets {
		t.CreatePath = true
	}
	return cfg, nil
}

// ReadConfigFile reads, parses and validates a config file without looking
// at the target paths: the daemon starts before the parallel file systems
// are mounted at boot, and runs on while one is unmounted (see CheckPaths).
func ReadConfigFile(path string) (*Config, error) {
	data, err := ReadFileLimited(path, MaxConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return ParseConfig(data, path)
}

// LoadConfigFile reads, parses and validates a config file, including that
// each target's path is an existing directory.
func LoadConfigFile(path string) (*Config, error) {
	cfg, err := ReadConfigFile(path)
	if err != nil {
		return nil, err
	}
	if err := cfg.CheckPaths(PathCheckDeadline); err != nil {
		return nil, err
	}
	return cfg, nil
}
