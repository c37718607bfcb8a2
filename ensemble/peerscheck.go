package ensemble

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/hashicorp/raft"
)

// checkPeersAgainstStore compares the peer list a member was started
// with against the membership its data dir holds. Once a data dir is
// initialised, raft follows the membership in it and reads the list no
// more, so a list that contradicts it (a member moved to another address)
// would be ignored without a word: that is refused. A list that only lags
// it (members added or removed since, with coordrun ensemble add/remove)
// is allowed with one notice.
func checkPeersAgainstStore(conf raft.Configuration, given []Peer, log *slog.Logger) error {
	known := map[string]string{}
	var ids []string
	for _, s := range conf.Servers {
		known[string(s.ID)] = string(s.Address)
		ids = append(ids, string(s.ID))
	}
	var givenIDs []string
	for _, p := range given {
		givenIDs = append(givenIDs, p.ID)
		if addr, ok := known[p.ID]; ok && addr != p.Addr {
			return configError("Peers", "--peers gives member %s the address %s, but the ensemble in this data dir "+
				"knows it at %s; an initialised member follows its data dir, not --peers. To move a member: "+
				"coordrun ensemble remove %s, then start it with an empty data dir and --join, and "+
				"coordrun ensemble add %s=%s", p.ID, p.Addr, addr, p.ID, p.ID, p.Addr)
		}
	}
	slices.Sort(ids)
	slices.Sort(givenIDs)
	if len(ids) == 1 && len(givenIDs) > 1 && slices.Contains(givenIDs, ids[0]) {
		// The usual cause: a first start without --peers, which
		// bootstrapped an ensemble of this member alone. It would stay
		// alone, apart from the others, whatever --peers says now.
		return configError("Peers", "this data dir holds an ensemble of member %s alone (was it first started without --peers?), "+
			"but --peers lists %s; an initialised member follows its data dir, so it would stay on its own. To make it one "+
			"of the others: stop it, empty its data dir, start it with --join, and run coordrun ensemble add %s PEER-ADDR "+
			"on a member of theirs; or keep its data and grow it with coordrun ensemble add (remove with coordrun ensemble remove)",
			ids[0], strings.Join(givenIDs, ","), ids[0])
	}
	if len(ids) > 0 && !slices.Equal(ids, givenIDs) {
		log.Info("the ensemble's members changed since --peers was written; an initialised member follows its data dir",
			"peers_flag", strings.Join(givenIDs, ","), "members", strings.Join(ids, ","))
	}
	return nil
}

// storedMembership is the membership raft restored from the data dir.
func storedMembership(r *raft.Raft) (raft.Configuration, error) {
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return raft.Configuration{}, fmt.Errorf("reading the stored membership: %w", err)
	}
	return f.Configuration(), nil
}
