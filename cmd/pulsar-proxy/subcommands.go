package main

// subcommand runs `pulsar-proxy check-config …` or `pulsar-proxy convert-config …` when args
// (the command line after the program name) start with one, and returns its exit code; ok is
// false for the proxy itself (flags only).
func subcommand(args []string) (code int, ok bool) {
	if len(args) == 0 {
		return 0, false
	}
	switch args[0] {
	case "check-config":
		return checkConfig(args[1:]), true
	case "convert-config":
		return convertConfig(args[1:]), true
	}
	return 0, false
}
