package docscheck

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Repo is a checkout: its root, and the Markdown files parsed so far (by path).
type Repo struct {
	Root  string
	pages map[string]*Page
}

// NewRepo opens the checkout at root.
func NewRepo(root string) *Repo { return &Repo{Root: root, pages: map[string]*Page{}} }

// OperatorPages are the pages the checks hold to the product: README.md, CONTRIBUTING.md and
// every docs/*.md, sorted.
func (r *Repo) OperatorPages() ([]string, error) {
	docs, err := filepath.Glob(filepath.Join(r.Root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	pages := []string{"README.md", "CONTRIBUTING.md"}
	for _, d := range docs {
		pages = append(pages, "docs/"+filepath.Base(d))
	}
	sort.Strings(pages[2:])
	return pages, nil
}

// Page parses the Markdown file at rel (slash-separated, relative to the root), once.
func (r *Repo) Page(rel string) (*Page, error) {
	if p, ok := r.pages[rel]; ok {
		return p, nil
	}
	src, err := os.ReadFile(filepath.Join(r.Root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, err
	}
	p := Parse(rel, src)
	r.pages[rel] = p
	return p, nil
}

// CheckLinks returns a problem for every relative link of page that does not lead to a file
// of the checkout (or to a heading of a Markdown file, for a link with an anchor). pending
// names pages another branch writes: a link to one is accepted while it does not exist, and
// checked like any other once it does. Links with a scheme (https:, mailto:) are not followed.
func (r *Repo) CheckLinks(page string, pending map[string]string) ([]string, error) {
	p, err := r.Page(page)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, l := range p.Links {
		if msg := r.checkLink(p, l.Text, pending); msg != "" {
			problems = append(problems, fmt.Sprintf("%s:%d: link %q: %s", page, l.Line, l.Text, msg))
		}
	}
	return problems, nil
}

// checkLink is what is wrong with one link of p, or "".
func (r *Repo) checkLink(p *Page, dest string, pending map[string]string) string {
	u, err := url.Parse(dest)
	switch {
	case err != nil:
		return err.Error()
	case u.Scheme != "" || u.Host != "":
		return ""
	case strings.HasPrefix(u.Path, "/"):
		return "absolute path: write it relative to the page"
	}
	target := p.Path
	if u.Path != "" {
		target = path.Clean(path.Join(path.Dir(p.Path), u.Path))
	}
	if target == ".." || strings.HasPrefix(target, "../") {
		return "leads out of the repository"
	}
	info, err := os.Stat(filepath.Join(r.Root, filepath.FromSlash(target)))
	if err != nil {
		if _, ok := pending[target]; ok && os.IsNotExist(err) && u.Fragment == "" {
			return ""
		}
		return fmt.Sprintf("%s does not exist", target)
	}
	if u.Fragment == "" {
		return ""
	}
	if info.IsDir() || !strings.HasSuffix(target, ".md") {
		return fmt.Sprintf("an anchor into %s, which is not a Markdown page", target)
	}
	tp, err := r.Page(target)
	if err != nil {
		return err.Error()
	}
	if !tp.Anchors[u.Fragment] {
		return fmt.Sprintf("%s has no heading with the anchor #%s", target, u.Fragment)
	}
	return ""
}
