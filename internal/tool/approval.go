package tool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Decision is what an approval policy says of one call: run it, refuse it, or ask a person first.
type Decision string

// Decisions of an approval policy.
const (
	Allow Decision = "allow"
	Deny  Decision = "deny"
	Ask   Decision = "ask"
)

// ApprovalRule is one rule of an agent's approval policy: the tools it names (names and "server__*"
// patterns, as Match reads them) and what it decides for their calls. With AllowIf, a JSON Schema, a
// call whose arguments satisfy the schema is allowed and only the others get Decision: "ask unless
// amount ≤ 100" is {decision: ask, allow_if: {properties: {amount: {maximum: 100}}}}.
type ApprovalRule struct {
	Tools    []string
	Decision Decision
	AllowIf  json.RawMessage // a JSON Schema object; nil: the rule decides every call of its tools
	// Reason is what the person asked (or the model refused) is told; "" gives a default.
	Reason string
}

// Approvals is an agent's approval policy, compiled: its rules in order, the first that names a tool
// deciding its calls. A tool no rule names is asked about when its server says it is destructive
// (Info.Destructive) and allowed otherwise. The nil *Approvals is that default alone.
type Approvals struct {
	rules []approvalRule
}

type approvalRule struct {
	ApprovalRule
	allowIf *jsonschema.Schema
}

// MaxApprovalRules bounds the rules of one agent's policy.
const MaxApprovalRules = 256

// NewApprovals checks and compiles rules. Each needs at least one valid pattern and a decision of
// allow, deny or ask; an allow_if must be a JSON Schema that compiles, and is meaningless on allow.
func NewApprovals(rules []ApprovalRule) (*Approvals, error) {
	if len(rules) > MaxApprovalRules {
		return nil, fmt.Errorf("approvals: %d rules; at most %d are allowed", len(rules), MaxApprovalRules)
	}
	a := &Approvals{rules: make([]approvalRule, 0, len(rules))}
	for i, r := range rules {
		where := "approvals[" + strconv.Itoa(i) + "]"
		if len(r.Tools) == 0 {
			return nil, fmt.Errorf("%s: tools is empty; name the tools the rule is for (names, or \"server__*\")", where)
		}
		if err := checkPatterns(where+".tools", r.Tools); err != nil {
			return nil, err
		}
		switch r.Decision {
		case Allow, Deny, Ask:
		default:
			return nil, fmt.Errorf("%s: decision %q is not one of allow, deny, ask", where, r.Decision)
		}
		cr := approvalRule{ApprovalRule: r}
		if len(bytes.TrimSpace(r.AllowIf)) > 0 {
			if r.Decision == Allow {
				return nil, fmt.Errorf("%s: allow_if on a rule that allows says nothing; use it with deny or ask", where)
			}
			sch, err := compileSchema("approvals-"+strconv.Itoa(i), r.AllowIf)
			if err != nil {
				return nil, fmt.Errorf("%s: allow_if: %w", where, err)
			}
			cr.allowIf = sch
		}
		a.rules = append(a.rules, cr)
	}
	return a, nil
}

// Decide says what the policy decides for a call of the tool info describes with arguments args (as
// the model sent them), and why, for the person or the model: "" for Allow.
func (a *Approvals) Decide(info Info, args json.RawMessage) (Decision, string) {
	if a != nil {
		for _, r := range a.rules {
			if !MatchAny(r.Tools, info.Name) {
				continue
			}
			if r.Decision == Allow || (r.allowIf != nil && satisfies(r.allowIf, args)) {
				return Allow, ""
			}
			return r.Decision, r.reason(info.Name)
		}
	}
	if info.Destructive {
		return Ask, "The tool " + info.Name + " may change or delete data (its server marks it destructive)."
	}
	return Allow, ""
}

// ReadsArguments reports whether the policy's decision on a call of the tool name depends on its
// arguments: whether the first rule for it has an allow_if. Otherwise the arguments need no preparing.
func (a *Approvals) ReadsArguments(name string) bool {
	if a == nil {
		return false
	}
	for _, r := range a.rules {
		if MatchAny(r.Tools, name) {
			return r.allowIf != nil
		}
	}
	return false
}

func (r approvalRule) reason(name string) string {
	switch {
	case r.Reason != "":
		return r.Reason
	case r.Decision == Deny:
		return "The tool " + name + " is not permitted for this agent."
	}
	return "The agent's approval policy asks a person before " + name + " runs."
}

// satisfies reports whether args, decoded as a tool's arguments are, satisfy sch; arguments that do
// not decode satisfy nothing.
func satisfies(sch *jsonschema.Schema, args json.RawMessage) bool {
	obj, _, err := decodeObject(args, true)
	return err == nil && sch.Validate(obj) == nil
}
