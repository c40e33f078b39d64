// Package keystore keeps the API keys created while the gateway runs
// (POST /admin/keys): in SQLite next to the embedded event store, or in
// PostgreSQL in fleet mode, where every instance reads the same keys.
//
// A key's secret is never stored: only a keyed hash of it (see Registry),
// and for a key that signs Bedrock requests (SigV4 needs the secret
// itself) its secret access key sealed with a key from the environment.
// Records are never deleted: a revoked key stays, for its audit trail.
package keystore

import (
	"context"
	"errors"
	"time"
)

// Record is one key as stored: its owner, its policy and its state. The
// hashes and the sealed secret never leave the gateway (json:"-").
type Record struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Team and App own the key; Team is its tenant for fair queueing and
	// budget.teams.
	Team string `json:"team,omitempty"`
	App  string `json:"app,omitempty"`
	// The caller the key stands for and its policy, as auth.keys entries.
	UserID            string   `json:"userId"`
	Tier              string   `json:"tier,omitempty"`
	Priority          string   `json:"priority,omitempty"`
	Models            []string `json:"models,omitempty"`
	MonthlyRequests   int      `json:"monthlyRequests,omitempty"`
	RequestsPerMinute int      `json:"requestsPerMinute,omitempty"`
	Concurrent        int      `json:"concurrent,omitempty"`
	DailyCostUSD      float64  `json:"dailyCostUsd,omitempty"`
	MonthlyCostUSD    float64  `json:"monthlyCostUsd,omitempty"`
	// PayloadLog logs the payloads of the key's turns.
	PayloadLog bool `json:"payloadLog,omitempty"`
	// Guardrails names the guardrails profile the key's turns are checked
	// under (guardrails.profiles); empty: none of its own.
	Guardrails string `json:"guardrails,omitempty"`
	// Prefix is the start of the secret, to tell keys apart in lists and
	// logs; the rest is never kept.
	Prefix string `json:"prefix"`
	// AccessKeyID is set for a key that signs Bedrock requests: the id
	// clients sign with (its secret is SealedSecret).
	AccessKeyID string `json:"accessKeyId,omitempty"`

	Hash         string    `json:"-"`
	PrevHash     string    `json:"-"`
	PrevUntil    time.Time `json:"previousValidUntil,omitzero"`
	SealedSecret []byte    `json:"-"`
	// PrevSealed is the previous access key id's sealed secret, within
	// the rotation's grace.
	PrevSealed []byte `json:"-"`

	CreatedAt time.Time `json:"createdAt"`
	CreatedBy string    `json:"createdBy,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"`
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
	RevokedAt time.Time `json:"revokedAt,omitzero"`
}

// stored is a Record as the database keeps it: with its hashes.
type stored struct {
	Record
	Hash         string `json:"hash"`
	PrevHash     string `json:"prevHash,omitempty"`
	SealedSecret []byte `json:"sealedSecret,omitempty"`
	PrevSealed   []byte `json:"prevSealed,omitempty"`
}

func toStored(r Record) stored {
	return stored{Record: r, Hash: r.Hash, PrevHash: r.PrevHash, SealedSecret: r.SealedSecret, PrevSealed: r.PrevSealed}
}

func (s stored) record() Record {
	r := s.Record
	r.Hash, r.PrevHash, r.SealedSecret, r.PrevSealed = s.Hash, s.PrevHash, s.SealedSecret, s.PrevSealed
	return r
}

// Status is a key's state at a moment.
func (r Record) Status(now time.Time) string {
	switch {
	case !r.RevokedAt.IsZero():
		return "revoked"
	case !r.ExpiresAt.IsZero() && !now.Before(r.ExpiresAt):
		return "expired"
	}
	return "active"
}

// Store keeps records. Put inserts or replaces a record by id; Version
// changes whenever any record does, so that a cache polls it cheaply —
// also when changes made at once by several instances commit in another
// order than they began.
type Store interface {
	Put(ctx context.Context, r Record) error
	Get(ctx context.Context, id string) (Record, bool, error)
	List(ctx context.Context) ([]Record, error)
	Version(ctx context.Context) (int64, error)
	Close() error
}

// ErrUnavailable is matched (errors.Is) by every error of a store whose
// database could not be reached or answered too late.
var ErrUnavailable = errors.New("key store unavailable")
