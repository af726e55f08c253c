package proxy

import (
	"fmt"

	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
	"github.com/pulsar-proxy/pulsar-proxy/internal/connlimit"
)

// Warnings are what the proxy warns of as it starts with cfg on this host: the configuration's
// own (config.Config.Warnings), the descriptor reserve against the open-files limit, and a
// token secret key file that looks encoded.
// check-config prints this same list, so that what it says and what the proxy logs cannot
// drift apart.
func Warnings(cfg *config.Config) []config.Warning {
	return warnings(cfg, connlimit.OpenFilesLimit())
}

func warnings(cfg *config.Config, openFiles uint64) []config.Warning {
	ws := cfg.Warnings()
	reserve := uint64(cfg.Session.DescriptorReserve)
	if kept, cut := connlimit.ReserveKept(openFiles, reserve); cut {
		ws = append(ws, config.Warning{Key: "session.descriptorReserve", Message: fmt.Sprintf(
			"%d is more than half the open-files limit (%d); %d is kept back instead (raise the limit: ulimit -n, or the container runtime's nofile)",
			reserve, openFiles, kept)})
	}
	if f := cfg.Auth.Token.SecretKeyFile; cfg.Auth.Enabled && f != "" {
		// Unreadable: Build says so, as an error.
		if key, err := authn.ReadSecretKey(f); err == nil && authn.EncodedSecretKey(key) != "" {
			ws = append(ws, config.Warning{Key: "auth.token.secretKeyFile", Message: fmt.Sprintf(
				"%s holds %s: its %d bytes are the key, as Pulsar's brokers read a tokenSecretKey file (file:///…), not what they decode to; "+
					"if the brokers were given the decoded key (tokenSecretKey=data:;base64,…), write the decoded bytes to the file (base64 -d)",
				f, authn.EncodedSecretKey(key), len(key))})
		}
	}
	return ws
}

// logSettings logs, as the proxy starts, each setting another implied (at info) and each of
// Warnings.
func logSettings(cfg *config.Config, ws []config.Warning, log zerolog.Logger) {
	for _, im := range cfg.Implied() {
		log.Info().Str("setting", im.Key).Str("value", im.Value).Str("implied_by", im.Because).
			Msg("setting implied by another: " + im.Key + ": " + im.Value)
	}
	for _, w := range ws {
		log.Warn().Str("setting", w.Key).Msg(w.Key + ": " + w.Message)
	}
}
