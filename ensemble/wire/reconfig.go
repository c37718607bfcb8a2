package wire

// ReconfigRequest asks the ensemble to change its members (opcode 16).
// Servers are given in ZooKeeper's dynamic-config form,
// "server.<id>=<host>:<port>[:...]" separated by commas; leaving servers by
// id. The reply is a GetDataResponse holding the new configuration.
type ReconfigRequest struct {
	JoiningServers string
	LeavingServers string
	NewMembers     string
	CurConfigID    int64
}

func (r *ReconfigRequest) Encode(e *Encoder) {
	e.String(r.JoiningServers)
	e.String(r.LeavingServers)
	e.String(r.NewMembers)
	e.Long(r.CurConfigID)
}

func (r *ReconfigRequest) Decode(d *Decoder) error {
	r.JoiningServers = d.String()
	r.LeavingServers = d.String()
	r.NewMembers = d.String()
	r.CurConfigID = d.Long()
	return d.Err()
}
