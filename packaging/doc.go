// Package packaging owns how plateau_exporter reaches cluster nodes: the RPM
// spec and its rpmlintrc, the systemd unit and the GPFS sudo drop-in, the
// sysusers.d, sudoers, sysconfig and udev files, the default plateau.yml,
// and the make targets (packaging.mk) that build the source tarball with
// vendored modules, the source RPM and the binary RPM. It has no Go code of
// its own: its tests check those files, unprivileged ones in make test and
// the root-only RPM build, install, rpmlint, systemd and sudo checks under
// the integration build tag.
package packaging
