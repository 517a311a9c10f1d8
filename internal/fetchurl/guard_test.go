package fetchurl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// tail ends every refusal of an internal address.
const tail = "; " + publicOnly

// resolverFunc turns a function into a Resolver.
type resolverFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

func (f resolverFunc) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return f(ctx, network, host)
}

// fakeDNS answers from a table of names; other names do not exist.
func fakeDNS(names map[string][]string) Resolver {
	return resolverFunc(func(_ context.Context, _, host string) ([]netip.Addr, error) {
		addrs, ok := names[host]
		if !ok {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		var out []netip.Addr
		for _, a := range addrs {
			out = append(out, netip.MustParseAddr(a))
		}
		return out, nil
	})
}

// newFetcher returns the tool as its concrete type, for tests that reach
// into the guard.
func newFetcher(opts Options) *fetcher {
	return New(opts).(*fetcher)
}

func TestRefusedAddresses(t *testing.T) {
	dns := fakeDNS(map[string][]string{
		"internal.example": {"127.0.0.1"},
		"mixed.example":    {"8.8.8.8", "10.0.0.5"},
		"mapped.example":   {"::ffff:127.0.0.1"},
		"metadata.example": {"169.254.169.254"},
		"v6.example":       {"2606:4700:4700::1111", "::1"},
	})
	tests := []struct {
		url  string
		want string // the refusal
		// resolved: refused when the connection is made, once the name is
		// resolved; the call's error then names the URL.
		resolved bool
	}{
		// IPv4 in every notation inet_aton reads.
		{url: "http://127.0.0.1/", want: "refused: 127.0.0.1 is an internal address (loopback)" + tail},
		{url: "http://127.1/", want: "refused: 127.1 is 127.0.0.1, an internal address (loopback)" + tail},
		{url: "http://127.0.1/", want: "refused: 127.0.1 is 127.0.0.1, an internal address (loopback)" + tail},
		{url: "http://2130706433/", want: "refused: 2130706433 is 127.0.0.1, an internal address (loopback)" + tail},
		{url: "http://017700000001/", want: "refused: 017700000001 is 127.0.0.1, an internal address (loopback)" + tail},
		{url: "http://0177.0.0.1/", want: "refused: 0177.0.0.1 is 127.0.0.1, an internal address (loopback)" + tail},
		{url: "http://0x7f.0.0.1/", want: "refused: 0x7f.0.0.1 is 127.0.0.1, an internal address (loopback)" + tail},
		{url: "http://0x7f000001/", want: "refused: 0x7f000001 is 127.0.0.1, an internal address (loopback)" + tail},
		{url: "http://0X7F.1/", want: "refused: 0X7F.1 is 127.0.0.1, an internal address (loopback)" + tail},
		{url: "http://0177.0x0.1/", want: "refused: 0177.0x0.1 is 127.0.0.1, an internal address (loopback)" + tail},
		{url: "http://127.0.0.1./", want: "refused: 127.0.0.1. is 127.0.0.1, an internal address (loopback)" + tail},
		{url: "http://0xa9.0376.43518/", want: "refused: 0xa9.0376.43518 is 169.254.169.254, an internal address (link-local, the cloud metadata service)" + tail},
		{url: "http://0/", want: "refused: 0 is 0.0.0.0, an internal address (unspecified)" + tail},
		{url: "http://0.0.0.0/", want: "refused: 0.0.0.0 is an internal address (unspecified)" + tail},
		// The internal IPv4 ranges.
		{url: "http://169.254.169.254/latest/meta-data/", want: "refused: 169.254.169.254 is an internal address (link-local, the cloud metadata service)" + tail},
		{url: "http://169.254.1.1/", want: "refused: 169.254.1.1 is an internal address (link-local)" + tail},
		{url: "http://100.64.0.1/", want: "refused: 100.64.0.1 is an internal address (shared address space, CGNAT)" + tail},
		{url: "http://10.0.0.1/", want: "refused: 10.0.0.1 is an internal address (private)" + tail},
		{url: "https://10.20.30.40:8443/", want: "refused: 10.20.30.40 is an internal address (private)" + tail},
		{url: "http://172.16.0.1/", want: "refused: 172.16.0.1 is an internal address (private)" + tail},
		{url: "http://172.31.255.254/", want: "refused: 172.31.255.254 is an internal address (private)" + tail},
		{url: "http://192.168.1.1/", want: "refused: 192.168.1.1 is an internal address (private)" + tail},
		{url: "http://198.18.0.1/", want: "refused: 198.18.0.1 is an internal address (benchmarking)" + tail},
		{url: "http://224.0.0.1/", want: "refused: 224.0.0.1 is an internal address (multicast)" + tail},
		{url: "http://240.0.0.1/", want: "refused: 240.0.0.1 is an internal address (reserved)" + tail},
		{url: "http://255.255.255.255/", want: "refused: 255.255.255.255 is an internal address (broadcast)" + tail},
		// IPv6, and IPv6 that embeds IPv4.
		{url: "http://[::1]/", want: "refused: ::1 is an internal address (loopback)" + tail},
		{url: "http://[0:0:0:0:0:0:0:1]:8080/", want: "refused: 0:0:0:0:0:0:0:1 is ::1, an internal address (loopback)" + tail},
		{url: "http://[::]/", want: "refused: :: is an internal address (unspecified)" + tail},
		{url: "http://[::ffff:127.0.0.1]/", want: "refused: ::ffff:127.0.0.1 is an internal address (IPv4-mapped 127.0.0.1, loopback)" + tail},
		{url: "http://[::ffff:7f00:1]/", want: "refused: ::ffff:7f00:1 is ::ffff:127.0.0.1, an internal address (IPv4-mapped 127.0.0.1, loopback)" + tail},
		{url: "http://[0:0:0:0:0:ffff:127.0.0.1]/", want: "refused: 0:0:0:0:0:ffff:127.0.0.1 is ::ffff:127.0.0.1, an internal address (IPv4-mapped 127.0.0.1, loopback)" + tail},
		{url: "http://[::ffff:a9fe:a9fe]/", want: "refused: ::ffff:a9fe:a9fe is ::ffff:169.254.169.254, an internal address (IPv4-mapped 169.254.169.254, link-local, the cloud metadata service)" + tail},
		{url: "http://[::127.0.0.1]/", want: "refused: ::127.0.0.1 is ::7f00:1, an internal address (IPv4-compatible, deprecated)" + tail},
		{url: "http://[::8.8.8.8]/", want: "refused: ::8.8.8.8 is ::808:808, an internal address (IPv4-compatible, deprecated)" + tail},
		{url: "http://[64:ff9b::127.0.0.1]/", want: "refused: 64:ff9b::127.0.0.1 is 64:ff9b::7f00:1, an internal address (NAT64 of 127.0.0.1, loopback)" + tail},
		{url: "http://[64:ff9b::a9fe:a9fe]/", want: "refused: 64:ff9b::a9fe:a9fe is an internal address (NAT64 of 169.254.169.254, link-local, the cloud metadata service)" + tail},
		{url: "http://[64:ff9b:1::808:808]/", want: "refused: 64:ff9b:1::808:808 is an internal address (NAT64 local-use)" + tail},
		{url: "http://[2002:7f00:1::]/", want: "refused: 2002:7f00:1:: is an internal address (6to4 of 127.0.0.1, loopback)" + tail},
		{url: "http://[2002:c0a8:101::1]/", want: "refused: 2002:c0a8:101::1 is an internal address (6to4 of 192.168.1.1, private)" + tail},
		{url: "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", want: "refused: 2001:0:4136:e378:8000:63bf:3fff:fdd2 is an internal address (Teredo)" + tail},
		{url: "http://[fe80::1]/", want: "refused: fe80::1 is an internal address (link-local)" + tail},
		{url: "http://[fe80::1%25eth0]/", want: "refused: fe80::1%eth0 is an internal address (link-local)" + tail},
		{url: "http://[2606:4700:4700::1111%25eth0]/", want: "refused: 2606:4700:4700::1111%eth0 names a network interface (zone eth0)" + tail},
		{url: "http://[fc00::1]/", want: "refused: fc00::1 is an internal address (unique local)" + tail},
		{url: "http://[fd12:3456::1]/", want: "refused: fd12:3456::1 is an internal address (unique local)" + tail},
		{url: "http://[fd00:ec2::254]/", want: "refused: fd00:ec2::254 is an internal address (unique local, the cloud metadata service)" + tail},
		{url: "http://[fec0::1]/", want: "refused: fec0::1 is an internal address (site-local)" + tail},
		{url: "http://[ff02::1]/", want: "refused: ff02::1 is an internal address (multicast)" + tail},
		{url: "http://[100::1]/", want: "refused: 100::1 is an internal address (discard-only)" + tail},
		{url: "http://[2001:db8::1]/", want: "refused: 2001:db8::1 is an internal address (documentation)" + tail},
		{url: "http://[4000::1]/", want: "refused: 4000::1 is an internal address (reserved)" + tail},
		// Names.
		{url: "http://localhost/", want: "refused: localhost is a name of this machine (loopback)" + tail},
		{url: "http://localhost./", want: "refused: localhost. is a name of this machine (loopback)" + tail},
		{url: "http://LocalHost:8080/", want: "refused: LocalHost is a name of this machine (loopback)" + tail},
		{url: "http://app.localhost/", want: "refused: app.localhost is a name of this machine (loopback)" + tail},
		{url: "http://internal.example/", resolved: true, want: "refused: internal.example resolves to 127.0.0.1, an internal address (loopback)" + tail},
		{url: "http://metadata.example/latest/", resolved: true, want: "refused: metadata.example resolves to 169.254.169.254, an internal address (link-local, the cloud metadata service)" + tail},
		{url: "http://mixed.example/", resolved: true, want: "refused: mixed.example resolves to 10.0.0.5, an internal address (private)" + tail},
		{url: "http://v6.example/", resolved: true, want: "refused: v6.example resolves to ::1, an internal address (loopback)" + tail},
		{url: "http://mapped.example/", resolved: true, want: "refused: mapped.example resolves to ::ffff:127.0.0.1, an internal address (IPv4-mapped 127.0.0.1, loopback)" + tail},
	}
	f := newFetcher(Options{Resolver: dns})
	f.guard.dial = func(_ context.Context, _, address string) (net.Conn, error) {
		t.Errorf("dialed %s", address)
		return nil, errors.New("no dialing in this test")
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			_, err := call(t, f, map[string]any{"url": tt.url})
			want := tt.want
			if tt.resolved {
				want = "fetch_url: get " + tt.url + ": " + tt.want
			}
			if err == nil || err.Error() != want {
				t.Errorf("Call(%s):\n got %v\nwant %s", tt.url, err, want)
			}

			// The same at connect time, whatever the URL check missed.
			u, _ := url.Parse(tt.url)
			_, err = f.guard.dialContext(t.Context(), "tcp", net.JoinHostPort(u.Hostname(), "80"))
			if _, ok := errors.AsType[*refusal](err); !ok {
				t.Errorf("dialContext(%s) = %v, want a refusal", u.Hostname(), err)
			}
		})
	}
}

// TestPublicAddresses keeps the guard from refusing what it must not,
// right beside the internal ranges.
func TestPublicAddresses(t *testing.T) {
	for _, s := range []string{
		"8.8.8.8", "1.1.1.1", "93.184.215.14", "11.0.0.1", "9.255.255.255", "100.63.255.255",
		"100.128.0.0", "126.255.255.255", "128.0.0.1", "169.253.255.255", "169.255.0.1", "172.15.255.255",
		"172.32.0.1", "192.167.255.255", "192.169.0.1", "198.17.255.255", "198.20.0.1", "223.255.255.255",
		"2606:4700:4700::1111", "2a00:1450:4007:80f::200e", "::ffff:8.8.8.8", "64:ff9b::8.8.8.8",
		"2002:808:808::1", "2001:4860:4860::8888",
	} {
		if why := internalReason(netip.MustParseAddr(s)); why != "" {
			t.Errorf("internalReason(%s) = %q, want public", s, why)
		}
	}
}

func TestAllow(t *testing.T) {
	g := newGuard([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}, nil)
	tests := []struct {
		addr string
		want string
	}{
		{"10.1.2.3", ""},
		{"::ffff:10.1.2.3", ""},
		{"fd12::1", ""},
		{"11.0.0.1", ""},
		{"192.168.1.1", "private"},
		{"127.0.0.1", "loopback"},
		{"fc00::1", "unique local"},
	}
	for _, tt := range tests {
		if got := g.blocked(netip.MustParseAddr(tt.addr)); got != tt.want {
			t.Errorf("blocked(%s) = %q, want %q", tt.addr, got, tt.want)
		}
	}
	if err := g.checkHost("10.1.2.3"); err != nil {
		t.Errorf("checkHost(10.1.2.3) = %v, want allowed", err)
	}
	want := "refused: 10.1 is an IPv4 address in a non-standard notation; write it as 10.0.0.1"
	if err := g.checkHost("10.1"); err == nil || err.Error() != want {
		t.Errorf("checkHost(10.1) = %v, want %s", err, want)
	}
}

func TestParseInetAton(t *testing.T) {
	tests := []struct {
		in   string
		want string // "" when not an address
	}{
		{"127.0.0.1", "127.0.0.1"},
		{"127.1", "127.0.0.1"},
		{"127.0.1", "127.0.0.1"},
		{"2130706433", "127.0.0.1"},
		{"017700000001", "127.0.0.1"},
		{"0x7f000001", "127.0.0.1"},
		{"0x7F.0.0.1", "127.0.0.1"},
		{"0177.0.0.01", "127.0.0.1"},
		{"1.2.65535", "1.2.255.255"},
		{"1.16777215", "1.255.255.255"},
		{"4294967295", "255.255.255.255"},
		{"0x", "0.0.0.0"},
		{"010.0.0.1", "8.0.0.1"},
		{"4294967296", ""},
		{"1.2.65536", ""},
		{"256.0.0.1", ""},
		{"1.2.3.4.5", ""},
		{"1..2", ""},
		{"08.0.0.1", ""},
		{"0xg", ""},
		{"+1", ""},
		{"1_000", ""},
		{"example.com", ""},
		{"", ""},
	}
	for _, tt := range tests {
		got := ""
		if addr, ok := parseInetAton(tt.in); ok {
			got = addr.String()
		}
		if got != tt.want {
			t.Errorf("parseInetAton(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestControlRefusesInternal(t *testing.T) {
	g := newGuard(nil, nil)
	want := "refused: 127.0.0.1 is an internal address (loopback)" + tail
	if err := g.control(t.Context(), "tcp4", "127.0.0.1:80", nil); err == nil || err.Error() != want {
		t.Errorf("control(127.0.0.1:80) = %v, want %s", err, want)
	}
	if err := g.control(t.Context(), "tcp6", "[2606:4700:4700::1111]:443", nil); err != nil {
		t.Errorf("control(public) = %v, want nil", err)
	}
}

// counter is an HTTP server that counts the requests it receives.
type counter struct {
	*httptest.Server
	hits atomic.Int32
}

// listenCounter starts a counter on addr (host:0), or returns nil when this
// machine cannot listen there.
func listenCounter(t *testing.T, addr string) *counter {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Logf("cannot listen on %s: %v", addr, err)
		return nil
	}
	c := &counter{}
	c.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		c.hits.Add(1)
		w.Write([]byte("secret"))
	}))
	c.Listener.Close()
	c.Listener = l
	c.Start()
	t.Cleanup(c.Close)
	return c
}

func portOf(rawURL string) string {
	u, _ := url.Parse(rawURL)
	return u.Port()
}

func TestRedirectToInternalRefused(t *testing.T) {
	loopback6 := listenCounter(t, "[::1]:0")
	loopback := listenCounter(t, "127.0.0.1:0")
	loopback2 := listenCounter(t, "127.0.0.2:0")
	dns := fakeDNS(map[string][]string{
		"localhost.":       {"127.0.0.2"},
		"localhost":        {"127.0.0.2"},
		"internal.example": {"127.0.0.2"},
	})
	tests := []struct {
		name   string
		target string
		inner  *counter // the server the target reaches, if any
		// want follows "fetch_url: get <first URL>"
		want string
	}{
		{
			name:   "cloud metadata",
			target: "http://169.254.169.254/latest/meta-data/",
			want:   ": redirect to http://169.254.169.254/latest/meta-data/: refused: 169.254.169.254 is an internal address (link-local, the cloud metadata service)" + tail,
		},
		{
			name:   "IPv6 loopback",
			target: "http://[::1]:" + port(loopback6) + "/",
			inner:  loopback6,
			want:   ": redirect to http://[::1]:" + port(loopback6) + "/: refused: ::1 is an internal address (loopback)" + tail,
		},
		{
			name:   "hexadecimal loopback",
			target: "http://0x7f000001:" + port(loopback) + "/",
			inner:  loopback,
			want:   ": redirect to http://0x7f000001:" + port(loopback) + "/: refused: 0x7f000001 is an IPv4 address in a non-standard notation; write it as 127.0.0.1",
		},
		{
			name:   "localhost with a dot",
			target: "http://localhost.:" + port(loopback2) + "/",
			inner:  loopback2,
			want:   ": redirect to http://localhost.:" + port(loopback2) + "/: refused: localhost. is a name of this machine (loopback)" + tail,
		},
		{
			name:   "name resolving to loopback",
			target: "http://internal.example:" + port(loopback2) + "/",
			inner:  loopback2,
			want:   " (redirected to http://internal.example:" + port(loopback2) + "/): refused: internal.example resolves to 127.0.0.2, an internal address (loopback)" + tail,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			outer := httptest.NewServer(http.RedirectHandler(tt.target, http.StatusFound))
			t.Cleanup(outer.Close)
			f := newFetcher(Options{Allow: allowLoopback, Resolver: dns})
			_, err := call(t, f, map[string]any{"url": outer.URL + "/"})
			want := "fetch_url: get " + outer.URL + "/" + tt.want
			if err == nil || err.Error() != want {
				t.Errorf("Call:\n got %v\nwant %s", err, want)
			}
			if tt.inner != nil && tt.inner.hits.Load() != 0 {
				t.Errorf("the internal server received %d requests", tt.inner.hits.Load())
			}
		})
	}
}

// port is the port c listens on, or 9 (discard) when c could not start.
func port(c *counter) string {
	if c == nil {
		return "9"
	}
	return portOf(c.URL)
}

// TestRebindingNeverReachesLoopback runs fetches against a name whose DNS
// answer flips between a public address and loopback on every lookup, as
// in DNS rebinding: the connection goes to the very address that was
// checked, never to loopback.
func TestRebindingNeverReachesLoopback(t *testing.T) {
	inner := listenCounter(t, "127.0.0.1:0")
	var (
		mu      sync.Mutex
		lookups int
		dialed  []string
	)
	rebinding := resolverFunc(func(context.Context, string, string) ([]netip.Addr, error) {
		mu.Lock()
		defer mu.Unlock()
		lookups++
		if lookups%2 == 1 {
			return []netip.Addr{netip.MustParseAddr("8.8.8.8")}, nil
		}
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	})
	f := newFetcher(Options{Resolver: rebinding})
	dialReal := f.guard.dial
	f.guard.dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		mu.Lock()
		dialed = append(dialed, address)
		mu.Unlock()
		if address == "8.8.8.8:"+port(inner) {
			return nil, errors.New("network unreachable in this test")
		}
		return dialReal(ctx, network, address)
	}
	target := "http://rebind.example:" + port(inner) + "/"
	var errs []string
	for range 4 {
		_, err := call(t, f, map[string]any{"url": target})
		errs = append(errs, fmt.Sprint(err))
	}
	wantErrs := []string{
		"fetch_url: get " + target + ": network unreachable in this test",
		"fetch_url: get " + target + ": refused: rebind.example resolves to 127.0.0.1, an internal address (loopback)" + tail,
	}
	wantErrs = append(wantErrs, wantErrs...)
	if diff := cmp.Diff(wantErrs, errs); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"8.8.8.8:" + port(inner), "8.8.8.8:" + port(inner)}, dialed); diff != "" {
		t.Errorf("dialed (-want +got):\n%s", diff)
	}
	if n := inner.hits.Load(); n != 0 {
		t.Errorf("the loopback server received %d requests", n)
	}
}
