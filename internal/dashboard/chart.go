package dashboard

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"time"
)

// The chart's geometry, in SVG user units (the page scales it).
const (
	chartW      = 480
	chartH      = 170
	chartLeft   = 36
	chartRight  = chartW - 8
	rateTop     = 20
	rateBottom  = 88
	flightTop   = 108
	flightBot   = 146
	axisLabelY  = 162
	maxColumns  = 240 // points drawn at most: samples are merged beyond it
	colorStarts = "#2563eb"
	colorLimit  = "#dc2626"
	colorFlight = "#059669"
	colorGrid   = "#e5e7eb"
	colorText   = "#6b7280"
)

// writeChart draws one credential's last span: starts/s and rate-limited
// replies/s in the upper panel, leases in flight against max_concurrent in
// the lower one.
func writeChart(w io.Writer, s chartSeries, span time.Duration) error {
	var b strings.Builder
	id := html.EscapeString(s.ID)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" role="img" font-family="system-ui, sans-serif" font-size="10">`, chartW, chartH)
	fmt.Fprintf(&b, `<title>%s: starts/s, rate-limited replies/s and leases in flight over the last %s</title>`, id, spanText(span))
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/>`, chartW, chartH)

	start := s.End.Add(-span)
	x := func(t time.Time) float64 {
		f := float64(t.Sub(start)) / float64(span)
		return chartLeft + math.Max(0, math.Min(1, f))*(chartRight-chartLeft)
	}
	pts := mergePoints(s.Points, start, span)

	// Upper panel: rates.
	peak := 0.0
	for _, p := range pts {
		peak = math.Max(peak, math.Max(p.StartsPerSec, p.LimitedPerSec))
	}
	top := niceCeil(math.Max(peak, 1))
	yRate := func(v float64) float64 { return rateBottom - v/top*(rateBottom-rateTop) }
	grid(&b, yRate(0), yRate(top/2), yRate(top))
	label(&b, chartLeft-4, yRate(top)+3, "end", numText(top))
	label(&b, chartLeft-4, yRate(0)+3, "end", "0")
	legend(&b, chartLeft, 11, colorStarts, "starts/s")
	legend(&b, chartLeft+70, 11, colorLimit, "rate limited/s")
	label(&b, chartRight, 11, "end", "peak "+numText(peak)+"/s")
	b.WriteString(ratePath(pts, x, yRate, func(p chartPoint) float64 { return p.LimitedPerSec }, colorLimit, false))
	b.WriteString(ratePath(pts, x, yRate, func(p chartPoint) float64 { return p.StartsPerSec }, colorStarts, true))

	// Lower panel: in flight, as steps, against the limit.
	limit := s.Max
	for _, p := range pts {
		limit = max(limit, p.InFlight)
	}
	limit = max(limit, 1)
	yFlight := func(v float64) float64 { return flightBot - v/float64(limit)*(flightBot-flightTop) }
	grid(&b, yFlight(0), yFlight(float64(limit)))
	label(&b, chartLeft-4, yFlight(float64(limit))+3, "end", fmt.Sprint(limit))
	label(&b, chartLeft-4, yFlight(0)+3, "end", "0")
	legend(&b, chartLeft, flightTop-6, colorFlight, fmt.Sprintf("in flight (max %d)", s.Max))
	if s.Max > 0 {
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="4 3"/>`,
			chartLeft, chartRight, yFlight(float64(s.Max)), yFlight(float64(s.Max)), colorText)
	}
	b.WriteString(flightPath(pts, x, yFlight))

	// Time axis.
	label(&b, chartLeft, axisLabelY, "start", "-"+spanText(span))
	label(&b, (chartLeft+chartRight)/2, axisLabelY, "middle", "-"+spanText(span/2))
	label(&b, chartRight, axisLabelY, "end", "now")
	if len(pts) == 0 {
		label(&b, (chartLeft+chartRight)/2, (rateTop+rateBottom)/2, "middle", "no samples yet")
	}
	b.WriteString(`</svg>`)
	_, err := io.WriteString(w, b.String())
	return err
}

// mergePoints keeps the points inside the window and merges neighbours so
// that at most maxColumns are drawn: rates are averaged, in flight takes
// the highest (a short peak stays visible).
func mergePoints(in []chartPoint, start time.Time, span time.Duration) []chartPoint {
	var kept []chartPoint
	for _, p := range in {
		if !p.At.Before(start) {
			kept = append(kept, p)
		}
	}
	if len(kept) <= maxColumns {
		return kept
	}
	width := span / maxColumns
	var out []chartPoint
	for i := 0; i < len(kept); {
		bucket := kept[i].At.Sub(start) / width
		acc := kept[i]
		n, rated := 1, 0.0
		sumS, sumL := 0.0, 0.0
		if acc.StartsPerSec >= 0 {
			sumS, sumL, rated = acc.StartsPerSec, acc.LimitedPerSec, 1
		}
		for i+n < len(kept) && kept[i+n].At.Sub(start)/width == bucket {
			p := kept[i+n]
			acc.At, acc.InFlight = p.At, max(acc.InFlight, p.InFlight)
			if p.StartsPerSec >= 0 {
				sumS, sumL, rated = sumS+p.StartsPerSec, sumL+p.LimitedPerSec, rated+1
			}
			n++
		}
		acc.StartsPerSec, acc.LimitedPerSec = -1, -1
		if rated > 0 {
			acc.StartsPerSec, acc.LimitedPerSec = sumS/rated, sumL/rated
		}
		out = append(out, acc)
		i += n
	}
	return out
}

func ratePath(pts []chartPoint, x func(time.Time) float64, y func(float64) float64, val func(chartPoint) float64, color string, fill bool) string {
	var line strings.Builder
	var first, last float64
	n := 0
	for _, p := range pts {
		v := val(p)
		if v < 0 {
			continue
		}
		cmd := "L"
		if n == 0 {
			cmd, first = "M", x(p.At)
		}
		last = x(p.At)
		fmt.Fprintf(&line, "%s%.1f %.1f ", cmd, x(p.At), y(v))
		n++
	}
	if n == 0 {
		return ""
	}
	var b strings.Builder
	if fill {
		fmt.Fprintf(&b, `<path d="%sL%.1f %.1f L%.1f %.1f Z" fill="%s" fill-opacity="0.12" stroke="none"/>`,
			line.String(), last, y(0), first, y(0), color)
	}
	fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.5" stroke-linejoin="round"/>`, strings.TrimSpace(line.String()), color)
	return b.String()
}

func flightPath(pts []chartPoint, x func(time.Time) float64, y func(float64) float64) string {
	if len(pts) == 0 {
		return ""
	}
	var d strings.Builder
	fmt.Fprintf(&d, "M%.1f %.1f ", x(pts[0].At), y(0))
	prevY := y(float64(pts[0].InFlight))
	fmt.Fprintf(&d, "L%.1f %.1f ", x(pts[0].At), prevY)
	for _, p := range pts[1:] {
		fmt.Fprintf(&d, "L%.1f %.1f L%.1f %.1f ", x(p.At), prevY, x(p.At), y(float64(p.InFlight)))
		prevY = y(float64(p.InFlight))
	}
	fmt.Fprintf(&d, "L%.1f %.1f Z", x(pts[len(pts)-1].At), y(0))
	return fmt.Sprintf(`<path d="%s" fill="%s" fill-opacity="0.25" stroke="%s" stroke-width="1.2"/>`, d.String(), colorFlight, colorFlight)
}

func grid(b *strings.Builder, ys ...float64) {
	for _, y := range ys {
		fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s"/>`, chartLeft, chartRight, y, y, colorGrid)
	}
}

func label(b *strings.Builder, x, y float64, anchor, text string) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="%s" fill="%s">%s</text>`, x, y, anchor, colorText, html.EscapeString(text))
}

func legend(b *strings.Builder, x, y float64, color, text string) {
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="8" height="8" rx="1" fill="%s"/>`, x, y-7, color)
	label(b, x+11, y, "start", text)
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p*(1+1e-9) {
			return m * p
		}
	}
	return 10 * p
}

func numText(v float64) string {
	switch {
	case v >= 100 || v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func spanText(d time.Duration) string {
	d = d.Round(time.Second)
	m, sec := int(d/time.Minute), int(d%time.Minute/time.Second)
	switch {
	case m == 0:
		return fmt.Sprintf("%ds", sec)
	case sec == 0:
		return fmt.Sprintf("%dm", m)
	}
	return fmt.Sprintf("%dm%02ds", m, sec)
}
