// Package promfetch reads recorded probe series for the backtest from a
// running Prometheus: the daemon's result gauges, split back into runs by
// the probe's last-success timestamp, in as many range queries as the
// server's resolution limit needs. It hands them to the backtest as
// backtest.Series, as the CSV reader does.
package promfetch
