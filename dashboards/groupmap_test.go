package dashboards

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestGroupMapsNameEveryGroup keeps the map at the top of each shipped rule
// file true: it names every group of the file once, in file order,
// with the group's interval, so that a site tuning one rule can trust it
// to find the rule's inputs.
func TestGroupMapsNameEveryGroup(t *testing.T) {
	entry := regexp.MustCompile(`^#   (plateau[\w.]*)\s+(default|\d+[smh])?`)
	for _, file := range shippedRuleFiles() {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Groups []struct {
				Name     string `yaml:"name"`
				Interval string `yaml:"interval"`
			} `yaml:"groups"`
		}
		if err := yaml.Unmarshal(data, &doc); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		head, _, _ := strings.Cut(string(data), "\ngroups:\n")
		var names, intervals []string
		for _, line := range strings.Split(head, "\n") {
			if m := entry.FindStringSubmatch(line); m != nil {
				names, intervals = append(names, m[1]), append(intervals, m[2])
			}
		}
		if len(names) != len(doc.Groups) {
			t.Fatalf("%s: the map names %d groups %v, the file has %d", file, len(names), names, len(doc.Groups))
		}
		for i, g := range doc.Groups {
			if names[i] != g.Name {
				t.Errorf("%s: map entry %d is %s, group %d is %s", file, i+1, names[i], i+1, g.Name)
			}
			want := g.Interval
			if want == "" {
				want = "default"
			}
			if intervals[i] != "" && intervals[i] != want {
				t.Errorf("%s: the map gives %s the interval %s, the group has %s", file, g.Name, intervals[i], want)
			}
		}
	}
}
