//go:build !linux

package proxyproc

import "os/exec"

func dieWithParent(cmd *exec.Cmd) {}
