// Package catalog is the store's product catalog and its search: the
// retrieval step of a turn looks the customer's question up here and hands
// the best items to the model as reference context, so answers about
// volumes, prices and stock come from the catalog rather than the model's
// memory.
//
// The catalog is a YAML file (the MangaAssist profile embeds catalog.yaml, a
// few hundred titles; catalog.file points at an edited copy). New builds an
// in-memory bilingual full-text index over it with bleve: Japanese fields go
// through bleve's CJK analyzer (width folding and character bigrams, so
// 「ワンピースの最新刊は？」 finds ワンピース without a dictionary), English
// fields through its English analyzer (stemming, stop words). Each gateway
// instance builds the same index from the same file at start; a fleet needs
// no shared search service.
package catalog

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"time"

	"gopkg.in/yaml.v3"
)

//go:generate go run ./gen -o catalog.yaml

//go:embed catalog.yaml
var embedded []byte

// Item is one product: a volume, a box set or a pre-order.
type Item struct {
	ID   string `yaml:"id"`
	Kind string `yaml:"kind"` // volume | set | preorder
	// Series is the series' Japanese title; SeriesEN its English one.
	Series   string `yaml:"series"`
	SeriesEN string `yaml:"seriesEn"`
	TitleJA  string `yaml:"titleJa"`
	TitleEN  string `yaml:"titleEn"`
	// Volume is the volume number (a set's last volume); Volumes the
	// series' volume count in print.
	Volume    int      `yaml:"volume"`
	Volumes   int      `yaml:"volumes"`
	Latest    bool     `yaml:"latest"` // the newest volume on sale
	Complete  bool     `yaml:"complete"`
	AuthorJA  string   `yaml:"authorJa"`
	AuthorEN  string   `yaml:"authorEn"`
	Publisher string   `yaml:"publisher"`
	GenresJA  []string `yaml:"genresJa"`
	GenresEN  []string `yaml:"genresEn"`
	// PriceJPY is the price in yen, tax included.
	PriceJPY int `yaml:"priceJpy"`
	// Stock is in_stock, few_left, preorder or out_of_stock.
	Stock    string   `yaml:"stock"`
	Released string   `yaml:"released"` // YYYY-MM-DD
	Aliases  []string `yaml:"aliases"`
	BlurbJA  string   `yaml:"blurbJa"`
	BlurbEN  string   `yaml:"blurbEn"`
}

// Config configures the catalog and its search step.
type Config struct {
	// Enabled switches the retrieval step on. Default true.
	Enabled bool `yaml:"enabled"`
	// File is the catalog YAML; empty uses the embedded MangaAssist catalog.
	File string `yaml:"file"`
	// TopK is how many items go into the context. Default 5.
	TopK int `yaml:"topK"`
	// Timeout is the search's share of the first-byte budget: a slower
	// search is abandoned and the turn answers without context. Default 150ms.
	Timeout time.Duration `yaml:"timeout"`
	// MaxItems bounds the catalog (and the index build at start). Default 20,000.
	MaxItems int `yaml:"maxItems"`
	// BuildTimeout bounds the index build at start. Default 10s.
	BuildTimeout time.Duration `yaml:"buildTimeout"`
	// Hybrid fuses the full-text ranking with the items nearest the
	// question by the first embedding tier's vectors (reciprocal rank
	// fusion). The items are embedded at start; the question, within
	// timeout, as one embedding call of the turn. When either fails the
	// search is full text alone. Unset: on when an embedding tier is
	// configured.
	Hybrid *bool `yaml:"hybrid"`
}

// HybridOn reports whether the search is hybrid with embeddingTiers
// embedding tiers configured.
func (c Config) HybridOn(embeddingTiers int) bool {
	if embeddingTiers == 0 {
		return false
	}
	return c.Hybrid == nil || *c.Hybrid
}

// DefaultConfig is the MangaAssist profile: the embedded catalog, top 5
// within 150 ms.
func DefaultConfig() Config {
	return Config{Enabled: true, TopK: 5, Timeout: 150 * time.Millisecond, MaxItems: 20_000, BuildTimeout: 10 * time.Second}
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	if c.TopK <= 0 || c.TopK > 50 {
		errs = append(errs, errors.New("topK: must be in 1..50"))
	}
	if c.Timeout <= 0 {
		errs = append(errs, errors.New("timeout: must be > 0"))
	}
	if c.MaxItems <= 0 {
		errs = append(errs, errors.New("maxItems: must be > 0"))
	}
	if c.BuildTimeout <= 0 {
		errs = append(errs, errors.New("buildTimeout: must be > 0"))
	}
	if c.File != "" {
		if _, err := os.Stat(c.File); err != nil {
			errs = append(errs, fmt.Errorf("file: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Load reads the catalog named by cfg.File, or the embedded one. Every item
// needs an id (unique), both titles and a known stock state.
func Load(cfg Config) ([]Item, error) {
	data := embedded
	if cfg.File != "" {
		var err error
		if data, err = os.ReadFile(cfg.File); err != nil {
			return nil, fmt.Errorf("catalog: %w", err)
		}
	}
	return Parse(data, cfg.MaxItems)
}

// Parse decodes a catalog file of at most maxItems items.
func Parse(data []byte, maxItems int) ([]Item, error) {
	var doc struct {
		Items []Item `yaml:"items"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("catalog: decode: %w", err)
	}
	if maxItems > 0 && len(doc.Items) > maxItems {
		return nil, fmt.Errorf("catalog: %d items; the limit is %d (catalog.maxItems)", len(doc.Items), maxItems)
	}
	seen := make(map[string]bool, len(doc.Items))
	for i, it := range doc.Items {
		switch {
		case it.ID == "":
			return nil, fmt.Errorf("catalog: items[%d]: id must not be empty", i)
		case seen[it.ID]:
			return nil, fmt.Errorf("catalog: items[%d]: duplicate id %q", i, it.ID)
		case it.TitleJA == "" || it.TitleEN == "":
			return nil, fmt.Errorf("catalog: item %s: titleJa and titleEn are required", it.ID)
		case stockJA[it.Stock] == "":
			return nil, fmt.Errorf("catalog: item %s: unknown stock %q (in_stock, few_left, preorder, out_of_stock)", it.ID, it.Stock)
		}
		seen[it.ID] = true
	}
	return doc.Items, nil
}

var stockJA = map[string]string{"in_stock": "在庫あり", "few_left": "残りわずか", "preorder": "予約受付中", "out_of_stock": "在庫切れ"}
var stockEN = map[string]string{"in_stock": "in stock", "few_left": "in stock, with only a few left", "preorder": "available for pre-order", "out_of_stock": "out of stock"}

// StockText is the stock state in the customer's language ("ja" or other).
func StockText(stock, locale string) string {
	if locale == "ja" {
		return stockJA[stock]
	}
	return stockEN[stock]
}
