package fetchurl

import (
	"flag"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

var testBase, _ = url.Parse("https://go.dev/doc/go1.26")

func TestExtractText(t *testing.T) {
	tests := []struct {
		name string
		html string
		want string
	}{
		{"title first", `<html><head><title> The  Title </title></head><body><p>Body</p></body></html>`,
			"The Title\n\nBody"},
		{"no title", `<p>Only body</p>`, "Only body"},
		{"scripts and styles dropped", `<p>a<script>var x = "script";</script>b<style>p{}</style>c</p>`, "abc"},
		{"noscript, template, svg dropped", `<p>keep</p><noscript>ns</noscript><template>tpl</template><svg><text>svg</text></svg>`, "keep"},
		{"svg title is not the page's", `<svg><title>icon</title></svg><p>text</p>`, "text"},
		{"entities decoded", `<p>&lt;b&gt; &amp; &eacute;&#233;&#xe9; &nbsp;x</p>`, "<b> & ééé x"},
		{"whitespace collapsed", "<p>  a \n\t b  </p>\n\n<p>c</p>", "a b\n\nc"},
		{"inline elements join", `<p>a<b>b</b> <i>c</i>d</p>`, "ab cd"},
		{"blocks on their own lines", `<div>a</div><div>b</div><p>c</p>d`, "a\nb\n\nc\n\nd"},
		{"line breaks", `a<br>b<br><br>c`, "a\nb\nc"},
		{"headings", `<h1>One</h1><h3>Three</h3>text`, "# One\n\n### Three\n\ntext"},
		{"list", `<ul><li>a</li><li>b <ul><li>c</li></ul></li></ul>`, "- a\n- b\n- c"},
		{"table", `<table><tr><th>k</th><th>v</th></tr><tr><td>a</td><td>1</td></tr></table>`, "k | v\na | 1"},
		{"pre keeps whitespace", "<p>x</p><pre>a  b\n  c\n\nd</pre><p>y</p>", "x\n\na  b\n  c\n\nd\n\ny"},
		{"relative link", `<a href="/pkg/">packages</a>`, "packages (https://go.dev/pkg/)"},
		{"link text is the URL", `<a href="https://go.dev/">https://go.dev/</a>`, "https://go.dev/"},
		{"fragment, mailto and javascript links", `<a href="#top">top</a> <a href="mailto:a@b">mail</a> <a href="javascript:x()">js</a>`, "top mail js"},
		{"empty link", `<a href="/x"><img src="i.png"></a>text`, "text"},
		{"hidden", `<p hidden>h</p><span aria-hidden="true">x</span><p>shown</p>`, "shown"},
		{"broken markup", `<p>a<div>b</p>c</span>`, "a\n\nb\n\nc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, extractText(tt.html, testBase)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestExtractTextGolden(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "article.html"))
	if err != nil {
		t.Fatal(err)
	}
	got := extractText(string(src), testBase) + "\n"
	golden := filepath.Join("testdata", "article.txt")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("extractText(article.html) (-%s +got):\n%s", golden, diff)
	}
}
