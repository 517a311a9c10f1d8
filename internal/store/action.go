package store

import "strings"

// ActionCallPrefix begins the id of the one tool call of a server action's run: the run stores an
// assistant record no model made, holding that call (see chat's planAction). The id is short enough
// (24 characters) for every provider, which takes at most 40.
const ActionCallPrefix = "act_"

// legacyActionCallPrefix began the ids of action calls stored before ActionCallPrefix.
const legacyActionCallPrefix = "action_"

// IsAction reports whether r is the record a server action's run starts with: an assistant turn no
// model made, holding the action's one call.
func IsAction(r *Record) bool {
	if r.Role != RoleAssistant || r.Model != "" || len(r.ToolCalls) != 1 {
		return false
	}
	id := r.ToolCalls[0].ID
	return strings.HasPrefix(id, ActionCallPrefix) || strings.HasPrefix(id, legacyActionCallPrefix)
}
