// Package docscheck holds the checks of the operator's pages (README.md, CONTRIBUTING.md and
// docs/*.md), run by `make test-unit`: every relative link and anchor resolves, the README's
// quick start is exactly the commands the Makefile runs, its sample configuration is one the
// proxy accepts, and the names the pages give (metrics, configuration keys, alerts) are names
// the product has. A manual that drifts from the product is caught here, not by an operator.
//
// It is a module of its own so that its Markdown parser stays out of the product's go.mod.
package docscheck

import (
	"bytes"
	"strconv"
	"strings"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/text"
)

// Page is what the checks need of one Markdown file.
type Page struct {
	Path     string // relative to the repository, with slashes
	Headings []Heading
	Anchors  map[string]bool // the headings' GitHub anchors
	Links    []Span          // link and image destinations
	Code     []Span          // inline code spans
	Blocks   []Block         // fenced code blocks
	Lines    int
}

// Heading is a heading's level, text and anchor.
type Heading struct {
	Level      int
	Text, Slug string
	Line       int
}

// Span is a piece of inline text and the line of the block it is in.
type Span struct {
	Text string
	Line int
}

// Block is a fenced code block: its info string (the language), its text, its first line and
// the anchors of the headings it sits under, outermost first.
type Block struct {
	Info  string
	Text  string
	Line  int
	Under []string
}

// Parse reads a Markdown file as GitHub renders it (CommonMark with GitHub's heading anchors).
func Parse(path string, src []byte) *Page {
	p := &Page{Path: path, Anchors: map[string]bool{}, Lines: bytes.Count(src, []byte("\n"))}
	doc := goldmark.New().Parser().Parse(text.NewReader(src))
	seen := map[string]int{}
	var stack []Heading
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		line := lineOf(n, src)
		switch n := n.(type) {
		case *ast.Heading:
			h := Heading{Level: n.Level, Text: plainText(n, src), Line: line}
			h.Slug = uniqueSlug(slug(h.Text), seen)
			p.Headings, p.Anchors[h.Slug] = append(p.Headings, h), true
			for len(stack) > 0 && stack[len(stack)-1].Level >= h.Level {
				stack = stack[:len(stack)-1]
			}
			stack = append(stack, h)
		case *ast.Link:
			p.Links = append(p.Links, Span{Text: string(n.Destination), Line: line})
		case *ast.Image:
			p.Links = append(p.Links, Span{Text: string(n.Destination), Line: line})
		case *ast.CodeSpan:
			p.Code = append(p.Code, Span{Text: plainText(n, src), Line: line})
		case *ast.FencedCodeBlock:
			p.Blocks = append(p.Blocks, fenced(n, src, line, stack))
		}
		return ast.WalkContinue, nil
	})
	return p
}

// fenced is a fenced code block with the anchors of the headings above it.
func fenced(n *ast.FencedCodeBlock, src []byte, line int, stack []Heading) Block {
	var b strings.Builder
	for i := 0; i < n.Lines().Len(); i++ {
		seg := n.Lines().At(i)
		b.Write(seg.Value(src))
	}
	under := make([]string, len(stack))
	for i, h := range stack {
		under[i] = h.Slug
	}
	info := ""
	if n.Info != nil {
		info = strings.TrimSpace(string(n.Info.Segment.Value(src)))
	}
	return Block{Info: info, Text: b.String(), Line: line, Under: under}
}

// plainText is the text of an inline tree: what GitHub makes an anchor of (code spans' text
// included, emphasis and link markup left out).
func plainText(n ast.Node, src []byte) string {
	var b strings.Builder
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch c := c.(type) {
		case *ast.Text:
			b.Write(c.Segment.Value(src))
			if c.SoftLineBreak() || c.HardLineBreak() {
				b.WriteByte(' ')
			}
		case *ast.String:
			b.Write(c.Value)
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

// lineOf is the first line of n's nearest block (inline nodes have no position of their own).
func lineOf(n ast.Node, src []byte) int {
	for ; n != nil; n = n.Parent() {
		if n.Type() == ast.TypeBlock && n.Lines().Len() > 0 {
			return bytes.Count(src[:n.Lines().At(0).Start], []byte("\n")) + 1
		}
	}
	return 0
}

// slug is GitHub's anchor for a heading's text: lower case, letters, digits, '-' and '_'
// kept, each space a '-', everything else dropped.
func slug(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(s)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsNumber(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// uniqueSlug numbers a repeated anchor as GitHub does: the second "usage" is "usage-1".
func uniqueSlug(s string, seen map[string]int) string {
	n := seen[s]
	seen[s]++
	if n == 0 {
		return s
	}
	return s + "-" + strconv.Itoa(n)
}
