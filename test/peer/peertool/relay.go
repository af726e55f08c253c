package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/golang-jwt/jwt/v5"
)

// relay listens on each LISTEN and forwards every connection to its DIAL, until SIGTERM.
func relay(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("relay: nothing to relay")
	}
	var lns []net.Listener
	for _, a := range args {
		from, to, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("relay: %q is not LISTEN=DIAL", a)
		}
		network, addr, err := endpoint(from)
		if err != nil {
			return err
		}
		if network == "unix" {
			os.Remove(addr)
		}
		ln, err := net.Listen(network, addr)
		if err != nil {
			return err
		}
		lns = append(lns, ln)
		dialNet, dialAddr, err := endpoint(to)
		if err != nil {
			return err
		}
		go serve(ln, dialNet, dialAddr)
	}
	fmt.Println("relay: ready")
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	for _, ln := range lns {
		ln.Close()
	}
	return nil
}

// endpoint reads tcp:HOST:PORT or unix:PATH.
func endpoint(s string) (network, addr string, err error) {
	network, addr, ok := strings.Cut(s, ":")
	if !ok || (network != "tcp" && network != "unix") {
		return "", "", fmt.Errorf("relay: %q is not tcp:HOST:PORT or unix:PATH", s)
	}
	return network, addr, nil
}

func serve(ln net.Listener, network, addr string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go pipe(c, network, addr)
	}
}

// pipe copies both ways, half-closing each side as the other ends (as TCP does).
func pipe(c net.Conn, network, addr string) {
	defer c.Close()
	d, err := net.Dial(network, addr)
	if err != nil {
		return
	}
	defer d.Close()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(d, c)
	go cp(c, d)
	<-done
	<-done
}

// token prints an HS256 token for a role, signed with a raw key file (Pulsar's
// tokenSecretKey as pulsar-client-go's integration tests keep it).
func token(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("token KEYFILE ROLE")
	}
	key, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": args[1]}).SignedString(key)
	if err != nil {
		return err
	}
	fmt.Print(s)
	return nil
}
