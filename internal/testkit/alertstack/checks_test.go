package alertstack

import "testing"

func TestWithMatcher(t *testing.T) {
	for _, c := range []struct{ selector, want string }{
		{`ALERTS`, `ALERTS{severity!="none"}`},
		{`ALERTS{}`, `ALERTS{severity!="none"}`},
		{`ALERTS{alertname="A"}`, `ALERTS{alertname="A",severity!="none"}`},
		{`ALERTS{alertname!~"A|B",instance!="x:1"}`, `ALERTS{alertname!~"A|B",instance!="x:1",severity!="none"}`},
	} {
		if got := WithMatcher(c.selector, `severity!="none"`); got != c.want {
			t.Errorf("WithMatcher(%q) = %q, want %q", c.selector, got, c.want)
		}
	}
}
