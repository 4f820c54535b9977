# Packaging targets, included by the top-level Makefile (so $(GO), $(LDFLAGS)
# and the version variables come from there).
#
#   make tarball   dist/plateau_exporter-SRCVERSION.tar.gz, vendored modules inside
#   make srpm      dist/plateau_exporter-VERSION-RELEASE.src.rpm
#   make rpm       the binary RPM in dist/, rebuilt from that SRPM as a build
#                  system (mock, Koji) would, without network
#   make rpmlint   rpmlint on both, with packaging/rpm/plateau_exporter.rpmlintrc
#   make man       dist/plateau_exporter.1, the man page (the binary's
#                  --help-man), as the RPM's %build writes and installs it
#
# rpmbuild works in a temporary _topdir; only dist/ is written in the tree.

DIST      ?= dist
RPMBUILD  ?= rpmbuild
RPMLINT   ?= rpmlint
PKG_NAME  := plateau_exporter
PKG_SPEC  := packaging/rpm/$(PKG_NAME).spec

# "VERSION RELEASE SRCVERSION" from git, computed once and only when a
# packaging target needs it (plain `make test` does not run git for it).
PKG_VERSIONS = $(eval PKG_VERSIONS := $$(shell sh packaging/version.sh))$(PKG_VERSIONS)
RPM_VERSION  = $(word 1,$(PKG_VERSIONS))
RPM_RELEASE  = $(word 2,$(PKG_VERSIONS))
# The tarball is named after the RPM version and release together, so two
# snapshots of one tag get different tarballs.
PKG_SRCVERSION = $(RPM_VERSION)-$(RPM_RELEASE)
PKG_TARBALL  = $(DIST)/$(PKG_NAME)-$(PKG_SRCVERSION).tar.gz
# rpmbuild adds the distribution tag (.el9) to the release, and names the
# binary package after the build architecture.
PKG_NVR      = $(PKG_NAME)-$(RPM_VERSION)-$(RPM_RELEASE)$(shell rpm --eval '%{?dist}' 2>/dev/null)
PKG_SRPM     = $(DIST)/$(PKG_NVR).src.rpm
PKG_RPM      = $(DIST)/$(PKG_NVR).$(shell rpm --eval '%{_arch}' 2>/dev/null).rpm

# rpmbuild checks BuildRequires against the rpm database. On a host that is
# not RPM-based (Debian, where rpm itself comes from dpkg) that database is
# empty and every BuildRequires would fail, so the check is skipped there;
# on Fedora/EL it stays on.
RPMBUILD_NODEPS = $(shell rpm -q --quiet rpm 2>/dev/null || echo --nodeps)
RPMBUILD_FLAGS ?=

# The %changelog entry of a packaged build: HEAD's commit date and author.
PKG_CHANGELOG_HEAD = $(shell git log -1 --date=format:'%a %b %d %Y' --format='* %ad %an <%ae>' 2>/dev/null)
PKG_DESCRIBE = $(shell git describe --tags --always --dirty 2>/dev/null)

.PHONY: tarball srpm rpm rpmlint man

tarball:
	@test -n "$(RPM_VERSION)" || { echo "cannot tell the version: packaging/version.sh failed"; exit 1; }
	GO="$(GO)" bash packaging/tarball.sh "$(PKG_SRCVERSION)" "$(PKG_TARBALL)"

# The spec in the SRPM carries the version, the release and the same -X
# version flags as `make build` ($(LDFLAGS)), so a rebuild anywhere later
# produces the same version information. Its changelog entry is HEAD's.
$(DIST)/$(PKG_NAME).spec: FORCE
	@mkdir -p $(DIST)
	sed -e 's|^%global plateau_version .*|%global plateau_version $(RPM_VERSION)|' \
	    -e 's|^%global plateau_release .*|%global plateau_release $(RPM_RELEASE)|' \
	    -e 's|^%global plateau_srcversion .*|%global plateau_srcversion $(PKG_SRCVERSION)|' \
	    -e 's|^%global plateau_ldflags .*|%global plateau_ldflags $(LDFLAGS)|' \
	    -e '/^%changelog/q' $(PKG_SPEC) >$@.tmp
	printf '%s - %s-%s\n- Built from git %s\n' "$(PKG_CHANGELOG_HEAD)" \
	    "$(RPM_VERSION)" "$(RPM_RELEASE)" "$(PKG_DESCRIBE)" >>$@.tmp
	mv $@.tmp $@

srpm: tarball $(DIST)/$(PKG_NAME).spec
	@set -e; top=$$(mktemp -d); trap 'rm -rf "$$top"' EXIT; \
	mkdir -p $$top/SOURCES; \
	cp $(PKG_TARBALL) $$top/SOURCES/; \
	cp packaging/$(PKG_NAME).sysusers $$top/SOURCES/; \
	$(RPMBUILD) -bs $(RPMBUILD_NODEPS) $(RPMBUILD_FLAGS) \
	    --define "_topdir $$top" --define "_srcrpmdir $(abspath $(DIST))" \
	    $(DIST)/$(PKG_NAME).spec

rpm: srpm
	@set -e; top=$$(mktemp -d); trap 'rm -rf "$$top"' EXIT; \
	$(RPMBUILD) --rebuild $(RPMBUILD_NODEPS) $(RPMBUILD_FLAGS) \
	    --define "_topdir $$top" --define "_rpmdir $(abspath $(DIST))" \
	    --define '_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm' \
	    $(PKG_SRPM)

rpmlint: rpm
	$(RPMLINT) -r packaging/rpm/$(PKG_NAME).rpmlintrc $(PKG_SRPM) $(PKG_RPM)

man: build
	@mkdir -p $(DIST)
	./$(BINARY) --help-man >$(DIST)/$(PKG_NAME).1.tmp
	mv $(DIST)/$(PKG_NAME).1.tmp $(DIST)/$(PKG_NAME).1

.PHONY: FORCE
FORCE:
