package catalog

import (
	"fmt"
	"strconv"
	"strings"
)

// ContextHeader opens the reference context a turn's model receives. The
// simulator looks for it; real models read the lines below it.
const ContextHeader = "Catalog search results for the customer's question (best match first). " +
	"Quote titles, volumes, prices and stock only from these lines:"

// Line is one item as the model reads it, on one line:
//
//   - id=MA001-V110 | series=ワンピース / One Piece | title=ワンピース 110巻 / One Piece, Vol. 110 | volume=110 | latest=yes | kind=volume | price=¥528 | stock=in_stock | released=2026-02-16 | author=尾田栄一郎 / Eiichiro Oda | genres=少年, 冒険 / shonen, adventure
func Line(it *Item) string {
	latest := "no"
	if it.Latest {
		latest = "yes"
	}
	return fmt.Sprintf("- id=%s | series=%s / %s | title=%s / %s | volume=%d | latest=%s | kind=%s | price=¥%d | stock=%s | released=%s | author=%s / %s | genres=%s / %s",
		it.ID, it.Series, it.SeriesEN, it.TitleJA, it.TitleEN, it.Volume, latest, it.Kind, it.PriceJPY, it.Stock, it.Released,
		it.AuthorJA, it.AuthorEN, strings.Join(it.GenresJA, ", "), strings.Join(it.GenresEN, ", "))
}

// Context is the reference text for lines (from Line), or "" for none.
func Context(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return ContextHeader + "\n" + strings.Join(lines, "\n")
}

// Entry is an item read back from a context.
type Entry struct {
	ID               string
	SeriesJA, Series string
	TitleJA, TitleEN string
	Volume           int
	Latest           bool
	Kind             string
	PriceJPY         int
	Stock            string
}

// ParseContext reads the items of the context inside text (a system prompt),
// in order; nil when text holds no catalog context. Malformed lines are
// skipped.
func ParseContext(text string) []Entry {
	i := strings.Index(text, ContextHeader)
	if i < 0 {
		return nil
	}
	var out []Entry
	for _, line := range strings.Split(text[i+len(ContextHeader):], "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "- id=") {
			continue
		}
		var e Entry
		for _, field := range strings.Split(strings.TrimPrefix(line, "- "), " | ") {
			k, v, ok := strings.Cut(field, "=")
			if !ok {
				continue
			}
			switch k {
			case "id":
				e.ID = v
			case "series":
				e.SeriesJA, e.Series, _ = strings.Cut(v, " / ")
			case "title":
				e.TitleJA, e.TitleEN, _ = strings.Cut(v, " / ")
			case "volume":
				e.Volume, _ = strconv.Atoi(v)
			case "latest":
				e.Latest = v == "yes"
			case "kind":
				e.Kind = v
			case "price":
				e.PriceJPY, _ = strconv.Atoi(strings.TrimPrefix(v, "¥"))
			case "stock":
				e.Stock = v
			}
		}
		if e.ID != "" {
			out = append(out, e)
		}
	}
	return out
}
