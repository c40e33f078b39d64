// Package helm holds the tests of fmgate's Helm chart (deploy/helm/fmgate):
// it is linted and rendered with Helm's own library for every documented
// values profile, and every rendered object is decoded strictly into the
// Kubernetes API types, so a misspelled field fails.
package helm
