package vision

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
)

// MaxURLBytes bounds a remote image URL.
const MaxURLBytes = 4096

// Hosts are the host patterns remote image URLs may name
// (server.images.allowedHosts): a host name or IP address, matched
// exactly, or "*.example.com", any name below example.com (not
// example.com itself). Case and a trailing dot do not matter.
type Hosts []string

// match reports whether host is allowed, and whether a pattern names it
// exactly (which alone lets it resolve to a private address).
func (h Hosts) match(host string) (allowed, exact bool) {
	host = normalHost(host)
	ip, ipErr := netip.ParseAddr(host)
	for _, p := range h {
		p = normalHost(p)
		if suffix, ok := strings.CutPrefix(p, "*."); ok {
			if ipErr != nil && strings.HasSuffix(host, "."+suffix) {
				allowed = true
			}
			continue
		}
		if p == host {
			return true, true
		}
		if pip, err := netip.ParseAddr(p); err == nil && ipErr == nil && pip.Unmap() == ip.Unmap() {
			return true, true
		}
	}
	return allowed, false
}

func normalHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
}

// check parses raw, a remote image URL, and holds it to the rules of a
// fetch: https (http only from a loopback host), no credentials, a host
// of h.
func (h Hosts) check(raw string) (*url.URL, error) {
	if len(raw) > MaxURLBytes {
		return nil, fmt.Errorf("the image URL is %d bytes; the limit is %d", len(raw), MaxURLBytes)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return nil, errors.New("the image URL is not a valid absolute URL")
	}
	host := u.Hostname()
	switch strings.ToLower(u.Scheme) {
	case "https":
	case "http":
		if !loopbackHost(host) {
			return nil, fmt.Errorf("fmgate fetches images over https only; http://%s is refused", trim(host))
		}
	default:
		return nil, fmt.Errorf("the image URL must be https, not %s", trim(u.Scheme))
	}
	if u.User != nil {
		return nil, errors.New("the image URL must not carry credentials")
	}
	if ok, _ := h.match(host); !ok {
		return nil, fmt.Errorf("the host %s is not one fmgate fetches images from: the operator must list it in server.images.allowedHosts", trim(host))
	}
	u.Fragment, u.RawFragment = "", ""
	return u, nil
}

// loopbackHost reports whether host is localhost or a loopback address:
// the only hosts fetched over plain http, for tests and local servers.
func loopbackHost(host string) bool {
	host = normalHost(host)
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// nonPublic are special-purpose ranges netip's predicates do not cover:
// no image server of the public internet is there.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"), // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),   // NAT64: may embed a private IPv4 address
	netip.MustParsePrefix("64:ff9b:1::/48"), // local NAT64
	netip.MustParsePrefix("100::/64"),
	netip.MustParsePrefix("2001:db8::/32"),
	netip.MustParsePrefix("2002::/16"), // 6to4: may embed a private IPv4 address
}

// public reports whether a is a public unicast address: not loopback,
// private, link-local (169.254.169.254, the cloud metadata service),
// multicast, unspecified or otherwise special.
func public(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsGlobalUnicast() || a.IsPrivate() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}
