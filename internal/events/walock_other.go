//go:build !unix

package events

import "os"

// lockDir takes no lock where flock is not available.
func lockDir(string) (*os.File, error) { return nil, nil }
