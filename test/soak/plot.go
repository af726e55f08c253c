package soak

import (
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// The chart: one panel per tracked series, time across, the warm-up shaded, the samples in
// blue and the fitted line over the rest in red (as bench/ draws its charts: the standard
// image package and basicfont's labels).
const (
	plotWidth   = 900
	panelHeight = 150
	marginLeft  = 90
	marginRight = 20
	marginTop   = 30
	panelGap    = 28
)

var (
	paper   = color.RGBA{255, 255, 255, 255}
	ink     = color.RGBA{30, 30, 30, 255}
	grid    = color.RGBA{220, 220, 220, 255}
	warmUp  = color.RGBA{242, 242, 242, 255}
	dataInk = color.RGBA{31, 119, 180, 255}
	fitInk  = color.RGBA{214, 39, 40, 255}
)

// Plot draws trends over samples as a PNG to w.
func Plot(w io.Writer, title string, samples []Sample, trends []Trend, from time.Duration) error {
	h := marginTop + len(trends)*(panelHeight+panelGap) + 10
	img := image.NewRGBA(image.Rect(0, 0, plotWidth, h))
	fill(img, img.Bounds(), paper)
	label(img, marginLeft, 18, title)
	var end time.Duration
	if len(samples) > 0 {
		end = samples[len(samples)-1].At
	}
	for i, t := range trends {
		y0 := marginTop + i*(panelHeight+panelGap) + panelGap/2
		p := panel{img: img, x0: marginLeft, y0: y0, w: plotWidth - marginLeft - marginRight, h: panelHeight, end: end}
		p.draw(samples, t, from)
	}
	return png.Encode(w, img)
}

type panel struct {
	img          *image.RGBA
	x0, y0, w, h int
	end          time.Duration
	lo, hi       float64
}

func (p *panel) draw(samples []Sample, t Trend, from time.Duration) {
	p.lo, p.hi = t.Min, t.Max
	if p.hi-p.lo < math.Max(1, 0.05*p.hi) { // a flat line sits mid-panel
		pad := math.Max(1, 0.05*p.hi) / 2
		p.lo, p.hi = p.lo-pad, p.hi+pad
	}
	fill(p.img, image.Rect(p.x0, p.y0, p.x(from), p.y0+p.h), warmUp)
	for _, f := range []float64{0, 0.5, 1} {
		y := p.y0 + int(float64(p.h)*(1-f))
		fill(p.img, image.Rect(p.x0, y, p.x0+p.w, y+1), grid)
		label(p.img, 4, y+4, t.Format(p.lo+f*(p.hi-p.lo)))
	}
	label(p.img, p.x0, p.y0-4, t.Name+"   slope "+t.FormatSlope(t.PerHour)+" after warm-up")
	label(p.img, p.x0+p.w-60, p.y0+p.h+13, p.end.Round(time.Second).String())
	for i := 1; i < len(samples); i++ {
		a, b := samples[i-1], samples[i]
		p.line(p.x(a.At), p.y(t.Get(a)), p.x(b.At), p.y(t.Get(b)), dataInk)
	}
	// The fit passes through the window's mean at the window's mean time.
	var mt, n float64
	for _, s := range samples {
		if s.At >= from {
			mt, n = mt+s.At.Hours(), n+1
		}
	}
	if n > 1 {
		mt /= n
		at := func(d time.Duration) float64 { return t.Mean + t.PerHour*(d.Hours()-mt) }
		p.line(p.x(from), p.y(at(from)), p.x(p.end), p.y(at(p.end)), fitInk)
	}
}

func (p *panel) x(d time.Duration) int {
	if p.end <= 0 {
		return p.x0
	}
	return p.x0 + int(float64(p.w)*float64(d)/float64(p.end))
}

func (p *panel) y(v float64) int {
	f := (v - p.lo) / (p.hi - p.lo)
	return p.y0 + int(float64(p.h)*(1-math.Max(0, math.Min(1, f))))
}

// line draws a segment two pixels thick.
func (p *panel) line(x1, y1, x2, y2 int, c color.RGBA) {
	steps := max(abs(x2-x1), abs(y2-y1), 1)
	for i := 0; i <= steps; i++ {
		x := x1 + (x2-x1)*i/steps
		y := y1 + (y2-y1)*i/steps
		fill(p.img, image.Rect(x, y, x+2, y+2), c)
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

func label(img *image.RGBA, x, y int, s string) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(ink), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}
