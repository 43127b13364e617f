package store

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/cmfs-project/cmfs/cluster"
)

// Buckets: nodes/<id> → Node; containers/<id BE> → Container;
// replicas/<node>/<container id BE> → Replica; commands/<id BE> →
// Command, its id from the bucket's sequence. Values are JSON.
var (
	bucketNodes      = []byte("nodes")
	bucketContainers = []byte("containers")
	bucketReplicas   = []byte("replicas")
	bucketCommands   = []byte("commands")
)

// Bolt is a Store in one bbolt file.
type Bolt struct {
	db *bolt.DB
}

var _ Store = (*Bolt)(nil)

// Open opens (creating if missing) the store at path. One process holds
// it: a second Open waits up to a few seconds and fails.
func Open(path string) (*Bolt, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open cluster store %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketNodes, bucketContainers, bucketReplicas, bucketCommands} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open cluster store %s: %w", path, err)
	}
	return &Bolt{db: db}, nil
}

// Close closes the file.
func (b *Bolt) Close() error { return b.db.Close() }

func key64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func put(bk *bolt.Bucket, k []byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return bk.Put(k, data)
}

// Load implements Store.
func (b *Bolt) Load() (Snapshot, error) {
	var s Snapshot
	err := b.db.View(func(tx *bolt.Tx) error {
		if err := each(tx.Bucket(bucketNodes), &s.Nodes); err != nil {
			return fmt.Errorf("nodes: %w", err)
		}
		if err := each(tx.Bucket(bucketContainers), &s.Containers); err != nil {
			return fmt.Errorf("containers: %w", err)
		}
		if err := each(tx.Bucket(bucketCommands), &s.Commands); err != nil {
			return fmt.Errorf("commands: %w", err)
		}
		return tx.Bucket(bucketReplicas).ForEachBucket(func(node []byte) error {
			if err := each(tx.Bucket(bucketReplicas).Bucket(node), &s.Replicas); err != nil {
				return fmt.Errorf("replicas of %s: %w", node, err)
			}
			return nil
		})
	})
	if err != nil {
		return Snapshot{}, fmt.Errorf("load cluster store: %w", err)
	}
	slices.SortFunc(s.Replicas, func(a, b cluster.Replica) int {
		if a.Container != b.Container {
			if a.Container < b.Container {
				return -1
			}
			return 1
		}
		return strings.Compare(string(a.Node), string(b.Node))
	})
	return s, nil
}

// each appends every value of bk, decoded, to out.
func each[T any](bk *bolt.Bucket, out *[]T) error {
	return bk.ForEach(func(k, v []byte) error {
		if v == nil {
			return nil // a nested bucket
		}
		var x T
		if err := json.Unmarshal(v, &x); err != nil {
			return fmt.Errorf("key %x: %w", k, err)
		}
		*out = append(*out, x)
		return nil
	})
}

// PutNode implements Store.
func (b *Bolt) PutNode(n Node) error {
	err := b.db.Update(func(tx *bolt.Tx) error {
		return put(tx.Bucket(bucketNodes), []byte(n.ID), n)
	})
	if err != nil {
		return fmt.Errorf("store node %s: %w", n.ID, err)
	}
	return nil
}

// Report implements Store.
func (b *Bolt) Report(r Report) error {
	err := b.db.Update(func(tx *bolt.Tx) error {
		reps := tx.Bucket(bucketReplicas)
		if r.Full && reps.Bucket([]byte(r.Node)) != nil {
			if err := reps.DeleteBucket([]byte(r.Node)); err != nil {
				return err
			}
		}
		bk, err := reps.CreateBucketIfNotExists([]byte(r.Node))
		if err != nil {
			return err
		}
		for _, id := range r.Removed {
			if err := bk.Delete(key64(uint64(id))); err != nil {
				return err
			}
		}
		for _, rep := range r.Replicas {
			if err := put(bk, key64(uint64(rep.Container)), rep); err != nil {
				return err
			}
		}
		cs := tx.Bucket(bucketContainers)
		for _, c := range r.Containers {
			if err := put(cs, key64(uint64(c.ID)), c); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store the report of %s: %w", r.Node, err)
	}
	return nil
}

// AddCommands implements Store.
func (b *Bolt) AddCommands(cmds []Command) ([]Command, error) {
	out := slices.Clone(cmds)
	err := b.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketCommands)
		for i := range out {
			id, err := bk.NextSequence()
			if err != nil {
				return err
			}
			out[i].ID = id
			if err := put(bk, key64(id), out[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store %d commands: %w", len(cmds), err)
	}
	return out, nil
}

// RemoveCommands implements Store.
func (b *Bolt) RemoveCommands(ids []uint64) error {
	if len(ids) == 0 {
		return nil
	}
	err := b.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketCommands)
		for _, id := range ids {
			if err := bk.Delete(key64(id)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("remove %d commands: %w", len(ids), err)
	}
	return nil
}
