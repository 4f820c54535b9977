package probe

import (
	"errors"
	"fmt"
	"strings"
)

// MaxErrorText bounds an error's text wherever the daemon shows it: a log
// line, the status page, /status.json. An error that names every entry of
// a huge sweep or every unknown key of a hostile file would otherwise be
// megabytes, copied into each of them on every request.
const MaxErrorText = 4 << 10

// BoundText returns s cut to at most about max bytes: its head and its
// tail (where wrapped errors put their cause), with the number of bytes
// left out between them, and valid UTF-8 where the cuts fell.
func BoundText(s string, max int) string {
	if len(s) <= max || max < 64 {
		if len(s) > max && max >= 0 {
			return strings.ToValidUTF8(s[:max], "")
		}
		return s
	}
	head := max * 3 / 4
	tail := max - head - 40
	cut := len(s) - head - tail
	return strings.ToValidUTF8(s[:head], "") + fmt.Sprintf(" [... %d bytes cut ...] ", cut) + strings.ToValidUTF8(s[len(s)-tail:], "")
}

// maxJoinedErrors is how many errors of one file are listed.
const maxJoinedErrors = 20

// JoinErrors is errors.Join of the first errors of a file, then how many
// more there are: a file with 100,000 unknown keys gets a readable error.
func JoinErrors(errs []error) error {
	if len(errs) <= maxJoinedErrors {
		return errors.Join(errs...)
	}
	return errors.Join(append(errs[:maxJoinedErrors:maxJoinedErrors], fmt.Errorf("... and %d more errors", len(errs)-maxJoinedErrors))...)
}
