package rig

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel send SIGTERM to cmd when this process dies (e.g. a test binary
// killed by its timeout), so a half-done rig.sh stops and cleans up instead of carrying on alone.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
