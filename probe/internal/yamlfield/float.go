package yamlfield

import (
	"strconv"
	"strings"
)

// Float formats v with prec significant digits so that every YAML tool
// reads a number: YAML 1.1 (PyYAML, and the tools built on it) takes an
// exponent only after a mantissa with a dot, so Go's "3e+09" would read
// back as the string "3e+09"; it is written "3.0e+09".
func Float(v float64, prec int) string {
	s := strconv.FormatFloat(v, 'g', prec, 64)
	if i := strings.IndexByte(s, 'e'); i >= 0 && !strings.Contains(s[:i], ".") {
		s = s[:i] + ".0" + s[i:]
	}
	return s
}
