package main

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// table is a titled grid of cells, printed aligned for the terminal or as Markdown.
type table struct {
	title string
	head  []string
	rows  [][]string
	notes []string
	left  bool // left-align every column (text columns)
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) text(w io.Writer) {
	width := make([]int, len(t.head))
	for _, r := range append([][]string{t.head}, t.rows...) {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	line := func(r []string) {
		var b strings.Builder
		for i, c := range r {
			pad := width[i] - utf8.RuneCountInString(c)
			switch {
			case i == 0:
				b.WriteString(c + strings.Repeat(" ", pad))
			case t.left:
				b.WriteString("  " + c + strings.Repeat(" ", pad))
			default:
				b.WriteString("  " + strings.Repeat(" ", pad) + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	fmt.Fprintf(w, "\n%s\n", t.title)
	line(t.head)
	sep := make([]string, len(t.head))
	for i := range sep {
		sep[i] = strings.Repeat("-", width[i])
	}
	line(sep)
	for _, r := range t.rows {
		line(r)
	}
	for _, n := range t.notes {
		fmt.Fprintf(w, "  %s\n", n)
	}
}

func (t *table) markdown(w io.Writer) {
	fmt.Fprintf(w, "\n### %s\n\n| %s |\n|", t.title, strings.Join(t.head, " | "))
	for i := range t.head {
		if i == 0 || t.left {
			fmt.Fprint(w, "---|")
		} else {
			fmt.Fprint(w, "---:|")
		}
	}
	fmt.Fprintln(w)
	for _, r := range t.rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
	}
	if len(t.notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range t.notes {
			fmt.Fprintf(w, "%s  \n", n)
		}
	}
}

func fus(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v >= 100_000:
		return fmt.Sprintf("%.0f ms", v/1000)
	case v >= 10_000:
		return fmt.Sprintf("%.1f ms", v/1000)
	case v >= 1000:
		return fmt.Sprintf("%.2f ms", v/1000)
	default:
		return fmt.Sprintf("%.0f µs", v)
	}
}

func fbytes(v float64) string {
	switch {
	case v >= 1<<20 || v <= -(1<<20):
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	case v >= 1<<10 || v <= -(1<<10):
		return fmt.Sprintf("%.1f KiB", v/(1<<10))
	default:
		return fmt.Sprintf("%.0f B", v)
	}
}
