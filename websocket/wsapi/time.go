package wsapi

import (
	"errors"
	"time"
)

// FormatTime writes epoch milliseconds as the service's DateFormatter does: ISO-8601 with the
// offset of loc (Z for UTC), the fraction only as long as it needs to be.
func FormatTime(ms int64, loc *time.Location) string {
	return time.UnixMilli(ms).In(loc).Format("2006-01-02T15:04:05.999999999Z07:00")
}

var errTime = errors.New("not an ISO-8601 date and time with an offset, e.g. 2024-05-01T12:00:00.000Z")

// ParseTime reads an event time as the service does: ISO-8601 with an offset (seconds and
// their fraction optional). It returns epoch milliseconds.
func ParseTime(s string) (int64, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04Z07:00"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UnixMilli(), nil
		}
	}
	return 0, errTime
}
