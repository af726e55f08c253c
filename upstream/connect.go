// Package upstream is the proxy's way out to brokers: dialling (TCP, TLS, PROXY header), the
// broker CONNECT in which the proxy introduces itself and names the client it speaks for,
// and the control connections the proxy keeps for its own requests (lookups, health pings).
// Client sessions and control connections reach brokers the same way, through a Connector.
package upstream

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// Connector opens connections to brokers: it dials, then sends the CONNECT in which the
// proxy authenticates as itself and names the client it speaks for.
type Connector struct {
	Dialer *Dialer
	// Version is the proxy's: proxy_version in every CONNECT, and client_version of the
	// proxy's own connections.
	Version string
	// ProtocolVersion of the proxy's own connections (a client's connection carries the
	// client's).
	ProtocolVersion int32
	// Credentials returns the proxy's own credentials; nil sends none. Called on every
	// CONNECT (and broker challenge), so a rotated token file is picked up.
	Credentials func() (method string, data []byte, err error)
	// OwnPrincipal is the original_principal of connections made for no client role (health
	// pings, clients without authentication): brokers refuse a proxy role without one.
	OwnPrincipal string
	// Timeout bounds the CONNECT exchange (after the dial).
	Timeout      time.Duration
	MaxFrameSize int
}

// Client is whom a broker connection speaks for. The zero value is the proxy itself.
type Client struct {
	Principal string // the client's authenticated role; "" without one
	// AuthMethod and AuthData, when set, go as original_auth_method/original_auth_data, for
	// brokers that authenticate them (authenticateOriginalAuthData); Expires is when they do.
	AuthMethod string
	AuthData   []byte
	Expires    time.Time
}

// Hello is what a client's own CONNECT said that its broker connection repeats: its version,
// protocol version and feature flags. A nil *Hello: the proxy's own connection.
type Hello struct {
	ClientVersion   string
	ProtocolVersion int32
	FeatureFlags    *pb.FeatureFlags
}

// Conn is a broker connection after its CONNECT was answered with CONNECTED.
type Conn struct {
	net.Conn
	Reader    *frame.Reader // read the CONNECTED; may hold frames read ahead of it
	Connected *pb.CommandConnected
}

// BrokerError is a broker's refusal of a CONNECT, kept so the client sees the broker's code
// and text.
type BrokerError struct {
	Code    pb.ServerError
	Message string
}

func (e *BrokerError) Error() string { return fmt.Sprintf("broker error %v: %s", e.Code, e.Message) }

// Open dials the broker at addr and completes the CONNECT for client (from: the client's
// addresses, for a PROXY header; nil for the proxy's own). Errors: *DialError (the broker
// could not be reached), *BrokerError (it refused the CONNECT), or another error (the
// exchange failed).
func (c *Connector) Open(ctx context.Context, addr string, from *Origin, hello *Hello, client Client) (*Conn, error) {
	nc, err := c.Dialer.Dial(ctx, addr, from)
	if err != nil {
		return nil, err
	}
	conn, err := c.connect(nc, hello, client)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return conn, nil
}

func (c *Connector) connect(nc net.Conn, hello *Hello, client Client) (*Conn, error) {
	cmd, err := c.connectCommand(hello, client)
	if err != nil {
		return nil, err
	}
	nc.SetDeadline(time.Now().Add(c.Timeout))
	defer nc.SetDeadline(time.Time{})
	if err := frame.WriteCommand(nc, cmd); err != nil {
		return nil, err
	}
	r := frame.NewReader(nc, c.MaxFrameSize)
	resp, err := r.ReadCommand()
	if err != nil {
		return nil, fmt.Errorf("no answer to CONNECT: %w", err)
	}
	switch resp.GetType() {
	case pb.BaseCommand_CONNECTED:
		return &Conn{Conn: nc, Reader: r, Connected: resp.GetConnected()}, nil
	case pb.BaseCommand_ERROR:
		return nil, &BrokerError{Code: resp.GetError().GetError(), Message: resp.GetError().GetMessage()}
	}
	return nil, fmt.Errorf("unexpected %v in answer to CONNECT", resp.GetType())
}

// connectCommand is the one broker CONNECT: the client's hello (or the proxy's own), the
// proxy's version and credentials, and the principal it speaks for.
func (c *Connector) connectCommand(hello *Hello, client Client) (*pb.BaseCommand, error) {
	req := &pb.CommandConnect{
		ClientVersion:   proto.String(c.Version),
		ProtocolVersion: proto.Int32(c.ProtocolVersion),
		ProxyVersion:    proto.String(c.Version),
	}
	if hello != nil {
		req.ClientVersion, req.ProtocolVersion = proto.String(hello.ClientVersion), proto.Int32(hello.ProtocolVersion)
		req.FeatureFlags = hello.FeatureFlags
	}
	if c.Credentials != nil {
		method, data, err := c.Credentials()
		if err != nil {
			return nil, fmt.Errorf("proxy credentials: %w", err)
		}
		req.AuthMethodName, req.AuthData = proto.String(method), data
	}
	// A broker takes a proxy role's requests as made by original_principal; a proxy role
	// without one is refused, so the proxy names itself where there is no client role.
	switch {
	case client.Principal != "":
		req.OriginalPrincipal = proto.String(client.Principal)
	case c.Credentials != nil && c.OwnPrincipal != "":
		req.OriginalPrincipal = proto.String(c.OwnPrincipal)
	}
	if client.AuthData != nil {
		req.OriginalAuthMethod = proto.String(client.AuthMethod)
		req.OriginalAuthData = proto.String(string(client.AuthData))
	}
	return &pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: req}, nil
}

// AuthResponse is the proxy's answer to a broker's AUTH_CHALLENGE on one of its own
// connections (a control connection, a shared multiplexed one): its credentials again,
// fresh from their source, under its version.
func (c *Connector) AuthResponse(addr string) (*pb.BaseCommand, error) {
	if c.Credentials == nil {
		return nil, fmt.Errorf("broker %s asked for credentials the proxy does not have", addr)
	}
	method, data, err := c.Credentials()
	if err != nil {
		return nil, fmt.Errorf("proxy credentials for broker %s: %w", addr, err)
	}
	return &pb.BaseCommand{Type: pb.BaseCommand_AUTH_RESPONSE.Enum(), AuthResponse: &pb.CommandAuthResponse{
		ClientVersion: proto.String(c.Version),
		Response:      &pb.AuthData{AuthMethodName: proto.String(method), AuthData: data},
	}}, nil
}
