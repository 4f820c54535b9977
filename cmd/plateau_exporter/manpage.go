package main

import (
	"strings"
	"time"
)

// manPageTemplate fixes the .TH line of kingpin's --help-man template,
// which carries the app's whole --version text: its lines after the first
// ("build user: ...") become the page's first paragraph and the header
// fields are cut at its blanks. The line becomes what man(7) expects:
// title, section, date (of the build), source ("plateau_exporter
// VERSION") and manual, each quoted. NAME gets its one-line summary. The
// RPM installs the page this makes.
func manPageTemplate(tmpl, ver, buildDate string) string {
	const th = `.TH {{.App.Name}} 1 {{.App.Version}} "{{.App.Author}}"`
	date := ""
	if t, err := time.Parse("20060102-15:04:05", buildDate); err == nil {
		date = t.Format("2006-01-02")
	}
	source := strings.TrimSpace("plateau_exporter " + ver)
	quote := func(s string) string {
		// Inside a quoted macro argument a double quote is written "".
		return `"` + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\e`), `"`, `""`) + `"`
	}
	// Left-aligned (.ad l): the help texts hold URLs and long flag defaults
	// that a justified line on an 80- or 100-column terminal cannot take
	// ("cannot adjust line").
	tmpl = strings.Replace(tmpl, th, ".TH PLATEAU_EXPORTER 1 "+quote(date)+" "+quote(source)+` "User Commands"`+"\n.ad l", 1)
	// NAME as whatis(1) and apropos(1) read it: "name \- summary".
	return strings.Replace(tmpl, ".SH \"NAME\"\n{{.App.Name}}\n", ".SH \"NAME\"\n{{.App.Name}} \\- probe HPC file systems against their plateau and export storage counters for Prometheus\n", 1)
}
