package tool

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestApprovalsDecide(t *testing.T) {
	policy, err := NewApprovals([]ApprovalRule{
		{Tools: []string{"bank__pay"}, Decision: Ask, AllowIf: json.RawMessage(`{"properties":{"amount":{"type":"number","maximum":100}},"required":["amount"]}`)},
		{Tools: []string{"fs__write_file"}, Decision: Ask, AllowIf: json.RawMessage(`{"properties":{"path":{"type":"string","pattern":"^/tmp/"}},"required":["path"]}`), Reason: "Writes outside /tmp need a person."},
		{Tools: []string{"fs__delete*"}, Decision: Deny},
		{Tools: []string{"fs__*"}, Decision: Allow},
		{Tools: []string{"shell"}, Decision: Ask},
	})
	if err != nil {
		t.Fatal(err)
	}
	builtin := Info{Name: "current_time", ReadOnly: true}
	destructive := Info{Name: "db__drop", Destructive: true}
	tests := []struct {
		name   string
		info   Info
		args   string
		want   Decision
		reason string // a substring of the reason
	}{
		{"allow_if satisfied", Info{Name: "bank__pay"}, `{"amount":40}`, Allow, ""},
		{"allow_if not satisfied", Info{Name: "bank__pay"}, `{"amount":400}`, Ask, "approval policy asks"},
		{"allow_if on a missing field", Info{Name: "bank__pay"}, `{}`, Ask, ""},
		{"arguments that are not JSON satisfy nothing", Info{Name: "bank__pay"}, `{"amount":`, Ask, ""},
		{"arguments as a JSON string", Info{Name: "bank__pay"}, `"{\"amount\":1}"`, Allow, ""},
		{"path inside the prefix", Info{Name: "fs__write_file"}, `{"path":"/tmp/a"}`, Allow, ""},
		{"path outside the prefix, with the rule's reason", Info{Name: "fs__write_file"}, `{"path":"/etc/passwd"}`, Ask, "need a person"},
		{"deny", Info{Name: "fs__delete_file"}, `{}`, Deny, "not permitted"},
		{"first match wins over a later allow", Info{Name: "fs__delete_tree", Destructive: true}, `{}`, Deny, ""},
		{"an allow rule overrides the destructive default", Info{Name: "fs__move", Destructive: true}, `{}`, Allow, ""},
		{"ask", Info{Name: "shell"}, `{"cmd":"ls"}`, Ask, ""},
		{"default: destructive asks", destructive, `{}`, Ask, "destructive"},
		{"default: read-only built-in is allowed", builtin, `{}`, Allow, ""},
		{"default: other tools are allowed", Info{Name: "other__x"}, `{}`, Allow, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := policy.Decide(tt.info, json.RawMessage(tt.args))
			if got != tt.want || !strings.Contains(reason, tt.reason) || (got == Allow) != (reason == "") {
				t.Errorf("Decide = %q, %q; want %q with a reason holding %q", got, reason, tt.want, tt.reason)
			}
		})
	}
}

func TestApprovalsDefault(t *testing.T) {
	var none *Approvals
	if got, _ := none.Decide(Info{Name: "db__drop", Destructive: true}, nil); got != Ask {
		t.Errorf("nil policy, destructive tool: %q, want ask", got)
	}
	if got, _ := none.Decide(Info{Name: "current_time", ReadOnly: true}, nil); got != Allow {
		t.Errorf("nil policy, read-only tool: %q, want allow", got)
	}
}

func TestNewApprovalsRefuses(t *testing.T) {
	tests := []struct {
		name string
		rule ApprovalRule
		want string
	}{
		{"no tools", ApprovalRule{Decision: Ask}, "tools is empty"},
		{"bad pattern", ApprovalRule{Tools: []string{"a*b"}, Decision: Ask}, `"*" may only end a pattern`},
		{"bad decision", ApprovalRule{Tools: []string{"a"}, Decision: "maybe"}, `decision "maybe"`},
		{"no decision", ApprovalRule{Tools: []string{"a"}}, `decision ""`},
		{"allow_if on allow", ApprovalRule{Tools: []string{"a"}, Decision: Allow, AllowIf: json.RawMessage(`{}`)}, "allow_if on a rule that allows"},
		{"allow_if that does not compile", ApprovalRule{Tools: []string{"a"}, Decision: Ask, AllowIf: json.RawMessage(`{"type":7}`)}, "approvals[0]: allow_if"},
		{"allow_if that is not JSON", ApprovalRule{Tools: []string{"a"}, Decision: Ask, AllowIf: json.RawMessage(`{`)}, "approvals[0]: allow_if"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewApprovals([]ApprovalRule{tt.rule})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one saying %q", err, tt.want)
			}
		})
	}
	if _, err := NewApprovals(make([]ApprovalRule, MaxApprovalRules+1)); err == nil {
		t.Error("too many rules: no error")
	}
}
