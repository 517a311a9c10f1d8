package store

// TransferParts are the parts of a database that `chatd migrate` copies from one store to another, in
// the order a load needs them: a table whose rows others refer to comes before those. Records come in
// two parts, because the calls of an assistant record must exist before the tool records that answer
// them, and the calls refer to their assistant record.
//
// Each store that can be copied from dumps a part's rows as columns and values, the values as Go sees
// them: string, int64, bool, []byte, time.Time (UTC) or nil. The column names are the schema's, the
// same in every store.
var TransferParts = []string{
	PartSessions, PartRecords, PartToolCalls, PartToolRecords, PartRuns, PartRunEvents, PartUsage,
	PartAPIKeys, PartAuthSessions, PartModelCalls,
}

// Names of TransferParts.
const (
	PartSessions     = "sessions"
	PartRecords      = "records" // every record but tool records
	PartToolCalls    = "tool_calls"
	PartToolRecords  = "tool_records"
	PartRuns         = "runs"
	PartRunEvents    = "run_events"
	PartUsage        = "usage"
	PartAPIKeys      = "api_keys"
	PartAuthSessions = "auth_sessions"
	PartModelCalls   = "model_calls"
)
