package proxyproc

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel stop the proxy when the test binary dies: a test run that
// times out (go test's panic) would otherwise leave its proxies running.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
