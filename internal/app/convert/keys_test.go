package convert

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// keyRow is one line of testdata/proxy-4.x-keys.tsv (the file says what each column is).
type keyRow struct {
	key, def, where, sample, want string
	context                       []string // key=value
	line                          int
}

// machineDependent reports whether the default depends on the machine (written in parentheses).
func (r keyRow) machineDependent() bool { return strings.HasPrefix(r.def, "(") }

func readKeyRows(t *testing.T) []keyRow {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "proxy-4.x-keys.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []keyRow
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cols := strings.Split(line, "\t")
		if len(cols) != 6 {
			t.Fatalf("proxy-4.x-keys.tsv:%d: %d columns, want 6", n, len(cols))
		}
		r := keyRow{key: cols[0], def: cols[1], where: cols[2], sample: cols[3], want: cols[4], line: n}
		if cols[5] != "" {
			r.context = strings.Split(cols[5], ";")
		}
		if r.sample == r.def {
			t.Fatalf("proxy-4.x-keys.tsv:%d: the sample of %s is its default", n, r.key)
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// confOf writes a proxy.conf: the broker URL every test file starts from (unless key is that
// setting), then the context, then key=value (a key given twice keeps its last value, so the
// row's own setting wins).
func confOf(context []string, key, value string) string {
	var b strings.Builder
	if key != "brokerServiceURL" {
		b.WriteString("brokerServiceURL=pulsar://broker-0:6650\n")
	}
	for _, kv := range context {
		b.WriteString(kv + "\n")
	}
	fmt.Fprintf(&b, "%s=%s\n", key, value)
	return b.String()
}

// lastNote is the note about key that is not the "set again later" of an earlier line.
func lastNote(t *testing.T, res *Result, key string) Note {
	t.Helper()
	for _, n := range res.Notes {
		if n.Key == key && !strings.Contains(n.Reason, "set again later in the file") {
			return n
		}
	}
	t.Fatalf("no note about %s", key)
	return Note{}
}

// TestEverySettingOf4x: every setting of the 4.x proxy (testdata/proxy-4.x-keys.tsv) is in the
// converter's table with Apache's default, and converting a file that sets it does what the
// list says: carried over to the pulsar-proxy key named, ignored (never flagged), or not
// supported (flagged, with a reason). What the report says about Apache's default is true:
// a value that is not the default is never called the default, and the default never flagged.
func TestEverySettingOf4x(t *testing.T) {
	rows := readKeyRows(t)
	listed := map[string]bool{}
	for _, r := range rows {
		listed[r.key] = true
	}
	for k := range apacheKeys {
		if !listed[k] {
			t.Errorf("the converter's table has %s, which testdata/proxy-4.x-keys.tsv does not list", k)
		}
	}
	for _, r := range rows {
		t.Run(r.key, func(t *testing.T) {
			info, ok := apacheKeys[r.key]
			if !ok {
				t.Fatalf("%s (%s) is not in the converter's table", r.key, r.where)
			}
			if r.machineDependent() != info.varies || (!info.varies && info.def != r.def) {
				t.Errorf("the table says the default is %q (machine-dependent %v); Apache's is %q", info.def, info.varies, r.def)
			}
			mapped := slices.Contains(mappedKeys, r.key)
			switch r.want {
			case "ignored", "unsupported":
				if mapped || info.reason == "" {
					t.Errorf("mapped %v, reason %q: want it reported as %s, with the reason", mapped, info.reason, r.want)
				}
				if info.harmless != (r.want == "ignored") {
					t.Errorf("harmless %v: want %s", info.harmless, r.want)
				}
			default:
				if !mapped {
					t.Errorf("not among the mapped keys: want it carried over to %s", r.want)
				}
			}

			// The sample: carried over, ignored or flagged as the list says.
			conf := confOf(r.context, r.key, r.sample)
			res, err := Convert(strings.NewReader(conf), "proxy.conf")
			if err != nil {
				t.Fatal(err)
			}
			noSilentDrops(t, conf, res)
			n := lastNote(t, res, r.key)
			switch r.want {
			case "ignored":
				if n.To != "" || n.Review || n.Reason == "" {
					t.Errorf("%s=%s: %+v, want it ignored with the reason, not flagged", r.key, r.sample, n)
				}
			case "unsupported":
				if n.To != "" || !n.Review || n.Reason == "" {
					t.Errorf("%s=%s: %+v, want it flagged as not supported, with what to do instead", r.key, r.sample, n)
				}
			default:
				if !strings.Contains(n.To, r.want) {
					t.Errorf("%s=%s: %+v, want it carried over to %s\n%s", r.key, r.sample, n, r.want, res.YAML)
				}
			}
			if strings.Contains(n.Reason, "at Apache's default") {
				t.Errorf("%s=%s is called Apache's default (%s): %+v", r.key, r.sample, r.def, n)
			}
			if strings.Contains(n.Reason, "not a setting of Apache") {
				t.Errorf("%s=%s is called unknown: %+v", r.key, r.sample, n)
			}

			// The default, alone: never flagged; called the default only when it is.
			if r.machineDependent() {
				return
			}
			conf = confOf(nil, r.key, r.def)
			if res, err = Convert(strings.NewReader(conf), "proxy.conf"); err != nil {
				t.Fatal(err)
			}
			noSilentDrops(t, conf, res)
			if n := lastNote(t, res, r.key); n.Review {
				t.Errorf("%s=%s (Apache's default) is flagged for review: %+v", r.key, r.def, n)
			}
		})
	}
}
