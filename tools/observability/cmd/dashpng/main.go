// Command dashpng draws pulsar-proxy's Grafana dashboard from a recording of the proxy's
// /metrics: the scrapes are loaded into Prometheus's own TSDB and every panel's queries are
// evaluated by Prometheus's own PromQL engine over the recording, then drawn where the
// dashboard places the panel (time series as lines, stat panels as their last value). It is
// how docs/operations.md's screenshot is made from a real run (make dashboard-screenshot).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"

	"github.com/pulsar-proxy/pulsar-proxy/tools/observability/promcheck"
)

func main() {
	recording := flag.String("recording", "", "scrapes of the proxy's /metrics, one JSON object a line")
	dashboard := flag.String("dashboard", "", "the Grafana dashboard (JSON)")
	out := flag.String("out", "dashboard.png", "the PNG to write")
	flag.Parse()
	if err := run(*recording, *dashboard, *out); err != nil {
		fmt.Fprintln(os.Stderr, "dashpng:", err)
		os.Exit(1)
	}
}

func run(recording, dashboardPath, out string) error {
	scrapes, err := promcheck.ReadRecording(recording)
	if err != nil {
		return err
	}
	db, err := promcheck.Load(scrapes)
	if err != nil {
		return err
	}
	defer db.Close()
	d, err := readDashboard(dashboardPath)
	if err != nil {
		return err
	}
	start, end := scrapes[0].Time, scrapes[len(scrapes)-1].Time
	evaluated, empty, err := evaluate(db, d, start, end)
	if err != nil {
		return err
	}
	if err := writePNG(out, draw(d, start, end)); err != nil {
		return err
	}
	fmt.Printf("dashpng: %d scrapes over %s, %d queries evaluated, %d of %d panels without data; wrote %s\n",
		len(scrapes), end.Sub(start).Round(time.Second), evaluated, empty, len(d.Panels), out)
	return nil
}

// evaluate runs every panel's queries over db from start to end and keeps the series on the
// panel; it counts the queries evaluated and the panels (rows aside) left without data.
func evaluate(db *promcheck.TSDB, d *dashboard, start, end time.Time) (evaluated, empty int, err error) {
	engine := promcheck.NewEngine()
	step := max(end.Sub(start)/120, time.Second)
	for i := range d.Panels {
		p := &d.Panels[i]
		for _, t := range p.Targets {
			s, err := querySeries(engine, db, t.Expr, t.LegendFormat, start, end, step)
			if err != nil {
				return evaluated, empty, fmt.Errorf("panel %q: %v", p.Title, err)
			}
			p.series = append(p.series, s...)
			evaluated++
		}
		if p.Type != "row" && len(p.series) == 0 {
			empty++
		}
	}
	return evaluated, empty, nil
}

// querySeries evaluates expr over db from start to end at step, each series named by the
// legend format.
func querySeries(engine *promql.Engine, db *promcheck.TSDB, expr, legendFormat string, start, end time.Time, step time.Duration) ([]series, error) {
	m, err := db.Range(engine, expr, start, end, step)
	if err != nil {
		return nil, err
	}
	var out []series
	for _, s := range m {
		out = append(out, series{name: legend(legendFormat, s.Metric), points: s.Floats})
	}
	return out, nil
}

// writePNG writes img to path, compressed as far as PNG goes.
func writePNG(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// legend fills a Grafana legend format ({{label}}) from a series' labels.
func legend(format string, ls labels.Labels) string {
	if format == "" {
		return ls.String()
	}
	out := format
	ls.Range(func(l labels.Label) {
		out = strings.ReplaceAll(out, "{{"+l.Name+"}}", l.Value)
	})
	return out
}

type dashboard struct {
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos struct {
		X, Y, W, H int
	} `json:"gridPos"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
	series []series
}

type series struct {
	name   string
	points []promql.FPoint
}

func readDashboard(path string) (*dashboard, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// Drawing: the dashboard's 24-column grid, Grafana's dark theme colours.
const (
	colW   = 72 // pixels per grid column
	rowH   = 28 // pixels per grid row
	margin = 8
)

var (
	background = color.RGBA{0x11, 0x12, 0x17, 0xff}
	panelBG    = color.RGBA{0x18, 0x1b, 0x1f, 0xff}
	gridLine   = color.RGBA{0x2c, 0x30, 0x35, 0xff}
	textColor  = color.RGBA{0xcc, 0xcc, 0xdc, 0xff}
	dimText    = color.RGBA{0x8e, 0x8e, 0x9e, 0xff}
	palette    = []color.RGBA{{0x73, 0xbf, 0x69, 0xff}, {0xf2, 0xcc, 0x0c, 0xff}, {0x8a, 0xb8, 0xff, 0xff}, {0xff, 0x78, 0x0a, 0xff},
		{0xf2, 0x49, 0x5c, 0xff}, {0x57, 0x94, 0xf2, 0xff}, {0xb8, 0x77, 0xd9, 0xff}, {0x70, 0x5d, 0xa0, 0xff}, {0x37, 0x87, 0x2d, 0xff}}
)

func draw(d *dashboard, start, end time.Time) *image.RGBA {
	bottom := 0
	for _, p := range d.Panels {
		bottom = max(bottom, p.GridPos.Y+p.GridPos.H)
	}
	header := 36
	img := image.NewRGBA(image.Rect(0, 0, 24*colW, header+bottom*rowH+margin))
	fill(img, img.Bounds(), background)
	text(img, margin, 24, fmt.Sprintf("%s - drawn by cmd/dashpng from a recording of a real run, %s (%s)", d.Title, start.UTC().Format("2006-01-02 15:04:05 UTC"), end.Sub(start).Round(time.Second)), textColor)
	for _, p := range d.Panels {
		r := image.Rect(p.GridPos.X*colW+margin/2, header+p.GridPos.Y*rowH+margin/2,
			(p.GridPos.X+p.GridPos.W)*colW-margin/2, header+(p.GridPos.Y+p.GridPos.H)*rowH-margin/2)
		switch p.Type {
		case "row":
			text(img, r.Min.X, r.Min.Y+16, p.Title, textColor)
		case "stat":
			fill(img, r, panelBG)
			text(img, r.Min.X+8, r.Min.Y+16, p.Title, dimText)
			v := "no data"
			if len(p.series) > 0 && len(p.series[0].points) > 0 {
				pts := p.series[0].points
				v = format(pts[len(pts)-1].F, p.FieldConfig.Defaults.Unit)
			}
			big(img, r.Min.X+12, r.Min.Y+60, v, palette[0])
		default:
			fill(img, r, panelBG)
			text(img, r.Min.X+8, r.Min.Y+16, p.Title, dimText)
			plot(img, image.Rect(r.Min.X+56, r.Min.Y+26, r.Max.X-10, r.Max.Y-40), p, start, end)
		}
	}
	return img
}

// plot draws a panel's series as lines, with a y axis and a legend under the plot.
func plot(img *image.RGBA, r image.Rectangle, p panel, start, end time.Time) {
	lo, hi := 0.0, 0.0
	for _, s := range p.series {
		for _, pt := range s.points {
			if !math.IsNaN(pt.F) && !math.IsInf(pt.F, 0) {
				lo, hi = math.Min(lo, pt.F), math.Max(hi, pt.F)
			}
		}
	}
	if hi == lo {
		hi = lo + 1
	}
	for i := range 3 {
		y := r.Max.Y - i*(r.Dy())/2
		hline(img, r.Min.X, r.Max.X, y, gridLine)
		text(img, r.Min.X-54, y+4, format(lo+(hi-lo)*float64(i)/2, p.FieldConfig.Defaults.Unit), dimText)
	}
	span := float64(end.Sub(start).Milliseconds())
	sort.SliceStable(p.series, func(i, j int) bool { return p.series[i].name < p.series[j].name })
	lx, ly := r.Min.X, r.Max.Y+16
	for i, s := range p.series {
		c := palette[i%len(palette)]
		px, py := -1, -1
		for _, pt := range s.points {
			if math.IsNaN(pt.F) || math.IsInf(pt.F, 0) {
				px = -1
				continue
			}
			x := r.Min.X + int(float64(pt.T-start.UnixMilli())/span*float64(r.Dx()))
			y := r.Max.Y - int((pt.F-lo)/(hi-lo)*float64(r.Dy()))
			if px >= 0 {
				line(img, px, py, x, y, c)
			} else {
				img.Set(x, y, c)
			}
			px, py = x, y
		}
		if i < 8 { // the legend: as many as fit in two lines
			name := s.name
			if len(name) > 28 {
				name = name[:27] + "~"
			}
			w := 14 + 7*len([]rune(name)) + 12
			if lx+w > r.Max.X && lx > r.Min.X {
				lx, ly = r.Min.X, ly+14
			}
			fill(img, image.Rect(lx, ly-8, lx+10, ly), c)
			text(img, lx+14, ly, name, dimText)
			lx += w
		}
	}
	if len(p.series) == 0 {
		text(img, r.Min.X+r.Dx()/2-28, r.Min.Y+r.Dy()/2, "no data", dimText)
	}
}

func format(v float64, unit string) string {
	switch unit {
	case "bytes", "Bps":
		suffix := map[string]string{"bytes": "B", "Bps": "B/s"}[unit]
		for _, u := range []string{"", "Ki", "Mi", "Gi"} {
			if math.Abs(v) < 1024 || u == "Gi" {
				return fmt.Sprintf("%.3g %s%s", v, u, suffix)
			}
			v /= 1024
		}
	case "s":
		switch a := math.Abs(v); {
		case a == 0:
			return "0"
		case a < 1e-3:
			return fmt.Sprintf("%.3gus", v*1e6)
		case a < 1:
			return fmt.Sprintf("%.3gms", v*1e3)
		case a < 3600*48:
			return (time.Duration(v) * time.Second).Round(time.Second).String()
		default:
			return fmt.Sprintf("%.1f days", v/86400)
		}
	case "reqps", "ops":
		return fmt.Sprintf("%.3g/s", v)
	}
	return fmt.Sprintf("%.4g", v)
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

func hline(img *image.RGBA, x0, x1, y int, c color.RGBA) {
	for x := x0; x <= x1; x++ {
		img.SetRGBA(x, y, c)
	}
}

// line draws from (x0,y0) to (x1,y1) (Bresenham), two pixels thick.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := 1, 1
	if x0 > x1 {
		sx = -1
	}
	if y0 > y1 {
		sy = -1
	}
	err := dx + dy
	for {
		img.SetRGBA(x0, y0, c)
		img.SetRGBA(x0, y0-1, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * err
		if e2 >= dy {
			err += dy
			x0 += sx
		}
		if e2 <= dx {
			err += dx
			y0 += sy
		}
	}
}

func abs(a int) int {
	if a < 0 {
		return -a
	}
	return a
}

func text(img *image.RGBA, x, y int, s string, c color.RGBA) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

// big writes s three times the size of text, for stat panels.
func big(img *image.RGBA, x, y int, s string, c color.RGBA) {
	small := image.NewRGBA(image.Rect(0, 0, 7*len([]rune(s))+2, 16))
	text(small, 0, 12, s, c)
	for sy := 0; sy < small.Bounds().Dy(); sy++ {
		for sx := 0; sx < small.Bounds().Dx(); sx++ {
			if px := small.RGBAAt(sx, sy); px.A > 0 {
				fill(img, image.Rect(x+3*sx, y-36+3*sy, x+3*sx+3, y-36+3*sy+3), px)
			}
		}
	}
}
