package fetchurl

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
)

// publicOnly ends every refusal of an internal address.
const publicOnly = "fetch_url only reaches public addresses"

// refusal is the error of a URL or an address the guard stops. Its message
// is written for the model: what was refused and why.
type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }

func refusef(format string, args ...any) error {
	return &refusal{msg: fmt.Sprintf(format, args...)}
}

// refuseAddr refuses addr, which host is or resolves to (verb), for why.
func refuseAddr(host, verb string, addr netip.Addr, why string) error {
	if host == addr.String() {
		return refusef("refused: %s is an internal address (%s); %s", host, why, publicOnly)
	}
	return refusef("refused: %s %s %s, an internal address (%s); %s", host, verb, addr, why, publicOnly)
}

// namedPrefix is an address range and what to call it in a refusal.
type namedPrefix struct {
	prefix netip.Prefix
	name   string
}

// internalRanges are refused unless allowed. The first range holding an
// address names it, so narrow ranges come before the wider ones they sit in.
var internalRanges = []namedPrefix{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space, CGNAT"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.169.254/32"), "link-local, the cloud metadata service"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("192.88.99.0/24"), "6to4 relay anycast"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},

	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible, deprecated"},
	// The local-use NAT64 prefix is refused whole: where it embeds the IPv4
	// address depends on the prefix length its operator chose (RFC 6052).
	{netip.MustParsePrefix("64:ff9b:1::/48"), "NAT64 local-use"},
	{netip.MustParsePrefix("100::/64"), "discard-only"},
	{netip.MustParsePrefix("2001::/32"), "Teredo"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("2001::/23"), "IETF protocol assignments"},
	{netip.MustParsePrefix("3fff::/20"), "documentation"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "unique local, the cloud metadata service"},
	{netip.MustParsePrefix("fc00::/7"), "unique local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
	// globalUnicast is the only IPv6 space in use on the Internet; NAT64
	// addresses, outside it, are checked by the IPv4 address they embed.
	globalUnicast = netip.MustParsePrefix("2000::/3")
)

// internalReason says why addr is internal — "loopback", "private", … — or
// returns "" when it is public. Addresses that embed an IPv4 address
// (IPv4-mapped, NAT64, 6to4) are internal when the embedded one is.
func internalReason(addr netip.Addr) string {
	addr = addr.WithZone("") // a Prefix never contains an address with a zone
	if addr.Is4In6() {
		v4 := addr.Unmap()
		if why := internalReason(v4); why != "" {
			return fmt.Sprintf("IPv4-mapped %s, %s", v4, why)
		}
		return ""
	}
	for _, r := range internalRanges {
		if r.prefix.Contains(addr) {
			return r.name
		}
	}
	if v4, kind, ok := embeddedIPv4(addr); ok {
		if why := internalReason(v4); why != "" {
			return fmt.Sprintf("%s of %s, %s", kind, v4, why)
		}
		return ""
	}
	if addr.Is6() && !globalUnicast.Contains(addr) {
		return "reserved"
	}
	return ""
}

// embeddedIPv4 returns the IPv4 address a NAT64 (64:ff9b::a.b.c.d) or a
// 6to4 (2002:aabb:ccdd::) address stands for.
func embeddedIPv4(addr netip.Addr) (v4 netip.Addr, kind string, ok bool) {
	b := addr.As16()
	switch {
	case nat64.Contains(addr):
		return netip.AddrFrom4([4]byte(b[12:16])), "NAT64", true
	case sixToFour.Contains(addr):
		return netip.AddrFrom4([4]byte(b[2:6])), "6to4", true
	}
	return netip.Addr{}, "", false
}

// Resolver looks up the addresses of a host; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// guard is the SSRF guard: it checks URLs before a request and addresses
// when a connection is made, and refuses internal ones unless allowed.
type guard struct {
	allow    []netip.Prefix
	resolver Resolver
	// dial connects to an address the guard has checked, an IP and a port.
	dial func(ctx context.Context, network, address string) (net.Conn, error)
}

func newGuard(allow []netip.Prefix, resolver Resolver) *guard {
	g := &guard{allow: allow, resolver: resolver}
	d := &net.Dialer{ControlContext: g.control}
	g.dial = d.DialContext
	return g
}

// blocked says why addr may not be reached, or returns "" when it may: it
// is public, or inside an allowed range.
func (g *guard) blocked(addr netip.Addr) string {
	addr = addr.WithZone("")
	for _, p := range g.allow {
		if p.Contains(addr) || p.Contains(addr.Unmap()) {
			return ""
		}
	}
	return internalReason(addr)
}

// checkURL refuses, before any lookup, what fetch_url never fetches: other
// schemes than http and https, credentials, and hosts that are internal by
// their spelling alone. A host name that passes is checked again, by the
// addresses it resolves to, when the connection is made.
func (g *guard) checkURL(u *url.URL) error {
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
	case "":
		return refusef("refused: %q has no scheme; give an absolute URL starting with http:// or https://", u.String())
	default:
		return refusef("refused: %s: URLs are not fetched; fetch_url reads only http:// and https:// URLs", u.Scheme)
	}
	if u.User != nil {
		return refusef("refused: the URL holds a user name or password (user@host); fetch_url does not send credentials")
	}
	if u.Hostname() == "" {
		return refusef("refused: %q has no host", u.String())
	}
	return g.checkHost(u.Hostname())
}

// checkHost refuses a host that is internal as written: an IP address in
// any notation inet_aton(3) reads (2130706433, 0x7f.1, 0177.0.0.1, …), an
// IPv6 address with a zone, or a localhost name. IPv4 addresses in another
// notation than a.b.c.d are refused even when public: some resolvers read
// them as addresses, others as names, so what they reach is not certain.
func (g *guard) checkHost(host string) error {
	if addr, err := netip.ParseAddr(host); err == nil {
		return g.checkLiteral(host, addr)
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if addr, ok := parseInetAton(name); ok {
		if why := g.blocked(addr); why != "" {
			return refuseAddr(host, "is", addr, why)
		}
		return refusef("refused: %s is an IPv4 address in a non-standard notation; write it as %s", host, addr)
	}
	if endsInNumber(name) {
		return refusef("refused: %s is not a valid IPv4 address or host name", host)
	}
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return refusef("refused: %s is a name of this machine (loopback); %s", host, publicOnly)
	}
	return nil
}

// checkLiteral refuses an IP address written as the host.
func (g *guard) checkLiteral(host string, addr netip.Addr) error {
	if why := g.blocked(addr); why != "" {
		return refuseAddr(host, "is", addr, why)
	}
	if addr.Zone() != "" {
		return refusef("refused: %s names a network interface (zone %s); %s", host, addr.Zone(), publicOnly)
	}
	return nil
}

// parseInetAton reads s as inet_aton(3) does: one to four parts, each
// decimal, octal (leading 0) or hexadecimal (leading 0x), the last filling
// the bytes left, so that 127.1 and 2130706433 both are 127.0.0.1.
func parseInetAton(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var n uint64
	for i, p := range parts {
		v, ok := parseAtonPart(p)
		if !ok {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			if v > 0xff {
				return netip.Addr{}, false
			}
			n |= v << (8 * (3 - i))
			continue
		}
		if v >= 1<<(8*(4-i)) {
			return netip.Addr{}, false
		}
		n |= v
	}
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}

// parseAtonPart reads one part of an inet_aton address.
func parseAtonPart(p string) (uint64, bool) {
	base := 10
	switch {
	case p == "":
		return 0, false
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		p, base = p[2:], 16
		if p == "" {
			return 0, true // "0x" is 0 to inet_aton
		}
	case len(p) >= 2 && p[0] == '0':
		p, base = p[1:], 8
	}
	v, err := strconv.ParseUint(p, base, 32)
	return v, err == nil
}

// endsInNumber reports whether the last label of name is a number, which
// makes it no DNS name: the URL standard reads such hosts as IPv4 addresses.
func endsInNumber(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	if rest, ok := strings.CutPrefix(last, "0x"); ok {
		return strings.Trim(rest, "0123456789abcdef") == ""
	}
	return last != "" && strings.Trim(last, "0123456789") == ""
}

// dialContext is the transport's only way to connect, for the first request
// and for every redirect. It resolves the host once, refuses it when any of
// its addresses is internal, and dials the very addresses it checked, so
// that a DNS answer that changes between check and connect (rebinding)
// cannot slip an internal address through.
//
// A name with both public and internal addresses is refused, not dialed on
// its public ones: a dial falls back to the next address when one fails,
// and whoever controls the name can make the public ones fail.
func (g *guard) dialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	if err := g.checkHost(host); err != nil {
		return nil, err
	}
	addrs, err := g.lookup(ctx, network, host)
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if why := g.blocked(a); why != "" {
			return nil, refuseAddr(host, "resolves to", a, why)
		}
	}
	var first error
	for _, a := range addrs {
		conn, err := g.dial(ctx, network, net.JoinHostPort(a.Unmap().String(), port))
		if err == nil {
			return conn, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}

// lookup returns the addresses of host: itself when it is an IP address.
func (g *guard) lookup(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if addr, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{addr}, nil
	}
	family := "ip"
	switch network {
	case "tcp4":
		family = "ip4"
	case "tcp6":
		family = "ip6"
	}
	addrs, err := g.resolver.LookupNetIP(ctx, family, host)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
	return addrs, nil
}

// control checks the address a socket is about to connect to. It is a
// second line behind dialContext, which only dials addresses it checked.
func (g *guard) control(_ context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("connect to %s: not an IP address and port", address)
	}
	if why := g.blocked(ap.Addr()); why != "" {
		return refuseAddr(ap.Addr().String(), "is", ap.Addr(), why)
	}
	return nil
}
