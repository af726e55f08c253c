package checkconfig

import (
	"bytes"
	"net/url"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
)

// redactedValue replaces a secret in the printed configuration.
const redactedValue = "<redacted>"

// Redacted is cfg as YAML, every key spelt as in the file, with secrets replaced by
// "<redacted>": inline tokens and passwords (a key whose name ends in token or password, but
// not a file path such as tokenFile), and the password of any URL.
func Redacted(cfg *config.Config) ([]byte, error) {
	c := *cfg // nested sections are values: setting strings on the copy leaves cfg alone
	redact(reflect.ValueOf(&c).Elem())
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&c); err != nil {
		return nil, err
	}
	return b.Bytes(), enc.Close()
}

func redact(v reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		f, fv := t.Field(i), v.Field(i)
		switch fv.Kind() {
		case reflect.Struct:
			redact(fv)
		case reflect.String:
			if fv.String() == "" || !fv.CanSet() {
				continue
			}
			if isSecret(f) {
				fv.SetString(redactedValue)
			} else if u, err := url.Parse(fv.String()); err == nil && u.User != nil {
				if _, has := u.User.Password(); has {
					u.User = url.UserPassword(u.User.Username(), "redacted")
				}
				fv.SetString(u.String())
			}
		}
	}
}

// isSecret: a string setting that holds a credential itself, by its YAML name.
func isSecret(f reflect.StructField) bool {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	name = strings.ToLower(name)
	return strings.HasSuffix(name, "token") || strings.HasSuffix(name, "password") || strings.HasSuffix(name, "secret")
}
