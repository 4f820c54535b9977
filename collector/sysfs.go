package collector

import (
	"bytes"
	"io/fs"

	"golang.org/x/sys/unix"
)

// readSysfsAttr reads the attribute name in the directory dfd with one
// read: sysfs hands out an attribute whole, at most a page, on the first
// read. Surrounding blanks are trimmed (model and serial are padded).
func readSysfsAttr(dfd int, name string, buf []byte) (string, error) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", err
		}
		return string(bytes.TrimSpace(buf[:n])), nil
	}
}

// openSysfsDir opens a sysfs directory (following the class symlinks) for
// readSysfsAttr, which spares the kernel a path walk from /sys for each
// attribute.
func openSysfsDir(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	return fd, nil
}

// openSysfsSubdir opens the directory name under dfd.
func openSysfsSubdir(dfd int, name string) (int, error) {
	return unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}
