package e2esni

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// holdsSocket reports whether process pid holds an open TCP socket whose local port is
// port (in this network namespace: /proc/net/tcp lists only its sockets). It matches the
// sockets' inodes against the process's descriptors.
func holdsSocket(pid, port int) (bool, error) {
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 {
				continue
			}
			// local_address is HEXADDR:HEXPORT; the inode is the tenth column.
			_, hexPort, _ := strings.Cut(f[1], ":")
			if p, err := strconv.ParseInt(hexPort, 16, 32); err == nil && int(p) == port && f[9] != "0" {
				inodes[f[9]] = true
			}
		}
	}
	if len(inodes) == 0 {
		return false, fmt.Errorf("no TCP socket with local port %d in /proc/net/tcp{,6}", port)
	}
	fds, err := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	if err != nil {
		return false, err
	}
	for _, fd := range fds {
		target, err := os.Readlink(fd)
		if err != nil {
			continue
		}
		if inode, ok := strings.CutPrefix(target, "socket:["); ok && inodes[strings.TrimSuffix(inode, "]")] {
			return true, nil
		}
	}
	return false, nil
}
