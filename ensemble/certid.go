package ensemble

// Client certificates as identities: the "x509" ACL scheme.
//
// A client that connects over TLS with a certificate the client CA
// verified is authenticated by it, without an auth packet, as Apache
// ZooKeeper's X509AuthenticationProvider does (there on the Netty server,
// once the handshake succeeds). By default the identity is the
// certificate's subject DN written as Java's X500Principal.getName()
// writes it (RFC 2253: the most specific RDN first, RFC 2253 escaping), so
// that ACLs written for ZooKeeper work unchanged. Config.ClientIdentity can
// pick SAN entries or single subject attributes instead, so that many
// hosts with their own certificates share one identity.

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/asn1"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"unicode/utf16"

	"github.com/coordrun/coordrun/ensemble/tree"
)

// CertIdentity chooses what of a verified client certificate becomes the
// connection's x509 identities.
type CertIdentity string

const (
	// CertIdentityDN: the subject DN, one identity, as ZooKeeper derives
	// it ("CN=host1,OU=batch,O=ops"). The default.
	CertIdentityDN CertIdentity = "dn"
	// The SAN forms: every subject alternative name of the type is one
	// identity, written as is ("host1.ops.example", "spiffe://ops/host1",
	// "host1@ops.example"), IP addresses in their canonical text form
	// ("10.0.0.7", "fd00::7").
	CertIdentitySANDNS   CertIdentity = "san-dns"
	CertIdentitySANURI   CertIdentity = "san-uri"
	CertIdentitySANEmail CertIdentity = "san-email"
	CertIdentitySANIP    CertIdentity = "san-ip"
	// The attribute forms: every value of the subject attribute is one
	// identity, written as that attribute appears in the DN ("O=ops"), so
	// that an ACL reads x509:O=ops:cdrwa.
	CertIdentityCN CertIdentity = "cn"
	CertIdentityO  CertIdentity = "o"
	CertIdentityOU CertIdentity = "ou"
)

// CertIdentities lists every CertIdentity, the default first.
var CertIdentities = []CertIdentity{
	CertIdentityDN,
	CertIdentitySANDNS, CertIdentitySANURI, CertIdentitySANEmail, CertIdentitySANIP,
	CertIdentityCN, CertIdentityO, CertIdentityOU,
}

// ParseCertIdentity parses one of the CertIdentities names (any case);
// the empty string is the default, dn.
func ParseCertIdentity(s string) (CertIdentity, error) {
	c := CertIdentity(strings.ToLower(strings.TrimSpace(s)))
	if c == "" {
		return CertIdentityDN, nil
	}
	if err := c.check(); err != nil {
		return "", err
	}
	return c, nil
}

func (c CertIdentity) check() error {
	if slices.Contains(CertIdentities, c) {
		return nil
	}
	names := make([]string, len(CertIdentities))
	for i, c := range CertIdentities {
		names[i] = string(c)
	}
	return fmt.Errorf("unknown client certificate identity %q: want one of %s", string(c), strings.Join(names, ", "))
}

const schemeX509 = "x509"

// connCertIdentities returns the x509 identities of a client connection,
// and whether it presented a certificate the client CA verified. A
// verified certificate may still yield no identity of the configured kind
// (no SAN of that type, say).
func connCertIdentities(nc net.Conn, kind CertIdentity) ([]tree.Identity, bool) {
	tc, ok := nc.(interface{ ConnectionState() tls.ConnectionState })
	if !ok {
		return nil, false
	}
	cs := tc.ConnectionState()
	// Only a chain the handshake verified counts: with ClientAuth set to
	// RequireAnyClientCert, say, PeerCertificates holds whatever the
	// client sent.
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil, false
	}
	return certIdentities(cs.VerifiedChains[0][0], kind), true
}

// certIdentities derives the x509 identities of a certificate, without
// duplicates, in the order the DN or the SAN extension lists them. Empty
// values are skipped: an empty id matches no valid ACL entry.
func certIdentities(cert *x509.Certificate, kind CertIdentity) []tree.Identity {
	var ids []tree.Identity
	add := func(id string) {
		if id == "" {
			return
		}
		for _, have := range ids {
			if have.ID == id {
				return
			}
		}
		ids = append(ids, tree.Identity{Scheme: schemeX509, ID: id})
	}
	switch kind {
	case CertIdentityDN, "":
		dn, err := rfc2253Name(cert.RawSubject)
		if err == nil {
			add(dn)
		}
	case CertIdentityCN, CertIdentityO, CertIdentityOU:
		oid := map[CertIdentity]asn1.ObjectIdentifier{
			CertIdentityCN: oidCommonName, CertIdentityO: oidOrganization, CertIdentityOU: oidOrgUnit,
		}[kind]
		rdns, err := parseRDNs(cert.RawSubject)
		if err != nil {
			return nil
		}
		for i := len(rdns) - 1; i >= 0; i-- {
			for _, atv := range rdns[i] {
				if atv.Type.Equal(oid) {
					add(atv.rfc2253())
				}
			}
		}
	case CertIdentitySANDNS, CertIdentitySANURI, CertIdentitySANEmail, CertIdentitySANIP:
		for _, v := range sanValues(cert, kind) {
			add(v)
		}
	}
	return ids
}

var (
	oidCommonName   = asn1.ObjectIdentifier{2, 5, 4, 3}
	oidOrganization = asn1.ObjectIdentifier{2, 5, 4, 10}
	oidOrgUnit      = asn1.ObjectIdentifier{2, 5, 4, 11}
	oidSAN          = asn1.ObjectIdentifier{2, 5, 29, 17}
)

// rfc2253Keywords are the attribute keywords Java writes in RFC 2253
// names (sun.security.x509.AVAKeyword entries marked RFC 2253 compliant);
// every other attribute is written as its dotted OID with a hex value.
var rfc2253Keywords = map[string]string{
	"2.5.4.3":                    "CN",
	"2.5.4.6":                    "C",
	"2.5.4.7":                    "L",
	"2.5.4.8":                    "ST",
	"2.5.4.9":                    "STREET",
	"2.5.4.10":                   "O",
	"2.5.4.11":                   "OU",
	"0.9.2342.19200300.100.1.25": "DC",
	"0.9.2342.19200300.100.1.1":  "UID",
}

// atv is one AttributeTypeAndValue with its value still encoded: how a
// value is written depends on its ASN.1 string type, which encoding/asn1
// would lose.
type atv struct {
	Type  asn1.ObjectIdentifier
	Value asn1.RawValue
}

// rdnSET is one RDN; encoding/asn1 decodes a slice type whose name ends
// in SET as an ASN.1 SET.
type rdnSET []atv

func parseRDNs(raw []byte) ([]rdnSET, error) {
	var rdns []rdnSET
	rest, err := asn1.Unmarshal(raw, &rdns)
	if err != nil {
		return nil, err
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("trailing data after the name")
	}
	return rdns, nil
}

// rfc2253Name writes a DER Name as X500Principal.getName() does: the RDNs
// from the last (most specific) to the first, joined by ",", the values of
// a multi-valued RDN joined by "+" in their encoded order.
func rfc2253Name(raw []byte) (string, error) {
	rdns, err := parseRDNs(raw)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for i := len(rdns) - 1; i >= 0; i-- {
		if i != len(rdns)-1 {
			b.WriteByte(',')
		}
		for j, a := range rdns[i] {
			if j > 0 {
				b.WriteByte('+')
			}
			b.WriteString(a.rfc2253())
		}
	}
	return b.String(), nil
}

// ASN.1 universal tags of the string types Java writes as text.
const (
	tagUTF8String      = 12
	tagPrintableString = 19
	tagT61String       = 20
	tagIA5String       = 22
	tagGeneralString   = 27
	tagBMPString       = 30
)

// rfc2253 writes one attribute as sun.security.x509.AVA.toRFC2253String
// does: keyword=value, where an attribute without a keyword, or a value
// not of a string type Java decodes, is "#" and the hex of the value's
// whole DER encoding.
func (a atv) rfc2253() string {
	oid := a.Type.String()
	keyword, ok := rfc2253Keywords[oid]
	if !ok {
		keyword = oid
	}
	text, isText := a.text()
	if !ok || !isText {
		return keyword + "=#" + hex.EncodeToString(a.Value.FullBytes)
	}
	return keyword + "=" + escapeRFC2253(text)
}

// text decodes a string-typed value with the charset Java uses for it.
func (a atv) text() (string, bool) {
	v := a.Value
	if v.Class != asn1.ClassUniversal || v.IsCompound {
		return "", false
	}
	switch v.Tag {
	case tagUTF8String:
		return strings.ToValidUTF8(string(v.Bytes), "\uFFFD"), true
	case tagPrintableString, tagT61String, tagIA5String, tagGeneralString:
		// ISO-8859-1: every byte is the code point of the same value.
		r := make([]rune, len(v.Bytes))
		for i, c := range v.Bytes {
			r[i] = rune(c)
		}
		return string(r), true
	case tagBMPString:
		if len(v.Bytes)%2 != 0 {
			return "", false
		}
		u := make([]uint16, len(v.Bytes)/2)
		for i := range u {
			u[i] = uint16(v.Bytes[2*i])<<8 | uint16(v.Bytes[2*i+1])
		}
		return string(utf16.Decode(u)), true
	}
	return "", false
}

// escapeRFC2253 escapes a value as Java's AVA.toRFC2253String does: a
// backslash before each of ,=+<>#;"\ and before leading and trailing
// spaces and carriage returns, NUL as \00, everything else as is.
func escapeRFC2253(s string) string {
	const escapees = ",=+<>#;\"\\"
	var first []rune
	for _, c := range s {
		switch {
		case strings.ContainsRune(escapees, c):
			first = append(first, '\\', c)
		case c == 0:
			first = append(first, '\\', '0', '0')
		default:
			first = append(first, c)
		}
	}
	space := func(c rune) bool { return c == ' ' || c == '\r' }
	lead := 0
	for lead < len(first) && space(first[lead]) {
		lead++
	}
	trail := len(first) - 1
	for trail >= 0 && space(first[trail]) {
		trail--
	}
	var b strings.Builder
	for i, c := range first {
		if i < lead || i > trail {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// GeneralName tags (RFC 5280) of the SAN types offered.
var sanTags = map[CertIdentity]int{
	CertIdentitySANEmail: 1, // rfc822Name
	CertIdentitySANDNS:   2, // dNSName
	CertIdentitySANURI:   6, // uniformResourceIdentifier
	CertIdentitySANIP:    7, // iPAddress
}

// sanValues returns the certificate's SANs of one type, read from the
// extension itself so that names come out exactly as issued (crypto/x509
// re-serialises URIs).
func sanValues(cert *x509.Certificate, kind CertIdentity) []string {
	tag := sanTags[kind]
	var out []string
	for _, ext := range cert.Extensions {
		if !ext.Id.Equal(oidSAN) {
			continue
		}
		var names []asn1.RawValue
		if rest, err := asn1.Unmarshal(ext.Value, &names); err != nil || len(rest) != 0 {
			return nil
		}
		for _, n := range names {
			if n.Class != asn1.ClassContextSpecific || n.Tag != tag {
				continue
			}
			if tag == 7 {
				if a, ok := netip.AddrFromSlice(n.Bytes); ok {
					out = append(out, a.String())
				}
				continue
			}
			out = append(out, string(n.Bytes))
		}
	}
	return out
}
