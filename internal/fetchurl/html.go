package fetchurl

import (
	"net/url"
	"strings"
	"unicode"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// skipped elements hold nothing a reader sees as text. The head is skipped
// whole; its title is written first, apart.
var skipped = map[atom.Atom]bool{
	atom.Head: true, atom.Title: true, atom.Script: true, atom.Style: true, atom.Noscript: true,
	atom.Template: true, atom.Svg: true, atom.Math: true, atom.Iframe: true, atom.Object: true,
	atom.Embed: true, atom.Canvas: true,
}

// blocks are the elements that stand on lines of their own, with the
// number of line breaks around them: 2 leaves a blank line.
var blocks = map[atom.Atom]int{
	atom.P: 2, atom.H1: 2, atom.H2: 2, atom.H3: 2, atom.H4: 2, atom.H5: 2, atom.H6: 2,
	atom.Blockquote: 2, atom.Pre: 2, atom.Figure: 2, atom.Hr: 2,
	atom.Div: 1, atom.Section: 1, atom.Article: 1, atom.Header: 1, atom.Footer: 1, atom.Nav: 1,
	atom.Aside: 1, atom.Main: 1, atom.Ul: 1, atom.Ol: 1, atom.Li: 1, atom.Dl: 1, atom.Dt: 1,
	atom.Dd: 1, atom.Table: 2, atom.Caption: 1, atom.Tr: 1, atom.Form: 1, atom.Fieldset: 1,
	atom.Legend: 1, atom.Figcaption: 1, atom.Address: 1, atom.Details: 1, atom.Summary: 1, atom.Br: 1,
}

// headings are written after as many # as their level, as in Markdown.
var headings = map[atom.Atom]string{
	atom.H1: "#", atom.H2: "##", atom.H3: "###", atom.H4: "####", atom.H5: "#####", atom.H6: "######",
}

// extractText returns the readable text of an HTML document: its title on
// the first line, then the body with block elements on lines of their own,
// whitespace collapsed (except in <pre>), entities decoded, and links
// followed by their address, resolved against base. What a reader does not
// see — scripts, styles, templates, SVG, hidden elements, the head — is
// left out.
func extractText(doc string, base *url.URL) string {
	root, err := html.Parse(strings.NewReader(doc))
	if err != nil {
		return "" // html.Parse fails only when its reader does
	}
	w := &textWriter{base: base}
	if title := findTitle(root); title != "" {
		w.text(title)
		w.lineBreak(2)
	}
	w.walk(root)
	return strings.TrimSpace(w.b.String())
}

// findTitle returns the document's <title>, whitespace collapsed.
func findTitle(n *html.Node) string {
	if n.Type == html.ElementNode && n.DataAtom == atom.Title && n.Namespace == "" {
		var b strings.Builder
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			if c.Type == html.TextNode {
				b.WriteString(c.Data)
			}
		}
		return strings.Join(strings.Fields(b.String()), " ")
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.ElementNode && (c.DataAtom == atom.Svg || c.DataAtom == atom.Math) {
			continue // their <title> is a tooltip
		}
		if title := findTitle(c); title != "" {
			return title
		}
	}
	return ""
}

// textWriter writes text with whitespace collapsed: spaces and line breaks
// are owed, and paid only before the next word, so none trail or pile up.
type textWriter struct {
	b      strings.Builder
	base   *url.URL
	breaks int  // line breaks owed before the next word
	space  bool // a space owed before the next word
	pre    int  // depth of <pre> elements, where whitespace is kept
}

func (w *textWriter) walk(n *html.Node) {
	switch n.Type {
	case html.TextNode:
		w.text(n.Data)
	case html.ElementNode:
		if !skipped[n.DataAtom] && !hidden(n) {
			w.element(n)
		}
	default:
		w.children(n)
	}
}

func (w *textWriter) children(n *html.Node) {
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		w.walk(c)
	}
}

// element writes an element: its line breaks, a marker for headings, list
// items and table cells, its children, and a link's address.
func (w *textWriter) element(n *html.Node) {
	breaks := blocks[n.DataAtom]
	w.lineBreak(breaks)
	switch n.DataAtom {
	case atom.Li:
		w.marker("-")
	case atom.Td, atom.Th:
		if previousElement(n) != nil {
			w.space = true
			w.marker("|")
		}
	case atom.Pre:
		w.pre++
		defer func() { w.pre-- }()
	}
	if h, ok := headings[n.DataAtom]; ok {
		w.marker(h)
	}
	start := w.b.Len()
	w.children(n)
	if n.DataAtom == atom.A {
		w.link(n, strings.TrimSpace(w.b.String()[start:]))
	}
	w.lineBreak(breaks)
}

// text writes a text node: whitespace collapsed to single spaces, or kept
// as it is inside <pre>.
func (w *textWriter) text(s string) {
	if w.pre > 0 {
		for i, line := range strings.Split(s, "\n") {
			if i > 0 {
				w.lineBreak(1)
				w.flush()
			}
			w.word(line)
		}
		return
	}
	fields := strings.Fields(s)
	if len(fields) == 0 {
		w.space = w.space || s != ""
		return
	}
	w.space = w.space || startsWithSpace(s)
	for i, f := range fields {
		if i > 0 {
			w.space = true
		}
		w.word(f)
	}
	w.space = endsWithSpace(s)
}

// word writes s after the line breaks or space owed. At the very start
// nothing is owed.
func (w *textWriter) word(s string) {
	if s == "" {
		return
	}
	w.flush()
	w.b.WriteString(s)
}

// flush pays what is owed before the next word.
func (w *textWriter) flush() {
	switch {
	case w.b.Len() == 0:
	case w.breaks > 0:
		w.b.WriteString(strings.Repeat("\n", w.breaks))
	case w.space:
		w.b.WriteByte(' ')
	}
	w.breaks, w.space = 0, false
}

// marker writes s as a word followed by a space: "-" before a list item.
func (w *textWriter) marker(s string) {
	w.word(s)
	w.space = true
}

// lineBreak owes at least n line breaks before the next word.
func (w *textWriter) lineBreak(n int) {
	w.breaks = max(w.breaks, n)
}

// link writes the address of an <a> after its text, when it leads
// somewhere else than the text says: "docs (https://example.com/docs)".
func (w *textWriter) link(n *html.Node, text string) {
	href := strings.TrimSpace(attr(n, "href"))
	if text == "" || href == "" || strings.HasPrefix(href, "#") {
		return
	}
	u, err := w.base.Parse(href)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return
	}
	target := u.String()
	if target == text {
		return
	}
	w.space = true
	w.word("(" + target + ")")
}

// hidden reports whether n is hidden from a reader by its attributes.
func hidden(n *html.Node) bool {
	for _, a := range n.Attr {
		if a.Namespace != "" {
			continue
		}
		if a.Key == "hidden" || a.Key == "aria-hidden" && strings.EqualFold(a.Val, "true") {
			return true
		}
	}
	return false
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Namespace == "" && a.Key == key {
			return a.Val
		}
	}
	return ""
}

func previousElement(n *html.Node) *html.Node {
	for s := n.PrevSibling; s != nil; s = s.PrevSibling {
		if s.Type == html.ElementNode {
			return s
		}
	}
	return nil
}

func startsWithSpace(s string) bool {
	return strings.TrimLeftFunc(s, unicode.IsSpace) != s
}

func endsWithSpace(s string) bool {
	return strings.TrimRightFunc(s, unicode.IsSpace) != s
}
