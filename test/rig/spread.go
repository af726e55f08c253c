package rig

import (
	"context"
	"fmt"
)

// spreadWithoutMoving is how many names CreateSpreadPartitionedTopic tries before it moves
// bundles: names whose partitions hash to bundles already owned by different brokers.
const spreadWithoutMoving = 30

// CreateSpreadPartitionedTopic creates a partitioned topic (a unique name from prefix) whose
// partitions are owned by both brokers, and returns it with each partition's owner. It prefers
// a name whose partition 0 and some other partition hash to bundles the two brokers already
// own; only when none of spreadWithoutMoving names does it place partition 0 on broker 1 and
// that other partition on broker 2 (PlaceTopic). Moving a bundle reloads every topic in it on
// the new owner, and a broker with transactions on can wedge its pending-acknowledgement
// replay threads when a bundle moves again during that reload (seen in Pulsar 4.0.8: every
// later subscription on that broker then waits forever), so the tests move bundles only when
// they must.
func (r *Rig) CreateSpreadPartitionedTopic(ctx context.Context, prefix string, partitions int) (string, []Broker, error) {
	for attempt := 0; attempt < spreadWithoutMoving+10; attempt++ {
		topic := "persistent://public/default/" + UniqueName(prefix)
		tn, err := ParseTopic(topic)
		if err != nil {
			return "", nil, err
		}
		first, other, err := r.twoBundles(ctx, tn, partitions)
		if err != nil {
			return "", nil, err
		}
		if other < 0 {
			continue
		}
		move := attempt >= spreadWithoutMoving
		if !move {
			spread, err := r.ownedApart(ctx, tn.Partition(0).String(), tn.Partition(other).String())
			if err != nil {
				return "", nil, err
			}
			if !spread {
				continue
			}
		}
		if err := r.CreatePartitionedTopic(ctx, topic, partitions); err != nil {
			return "", nil, err
		}
		if move {
			if err := r.PlaceTopic(ctx, tn.Partition(0).String(), 1); err != nil {
				return "", nil, err
			}
			if err := r.PlaceTopic(ctx, tn.Partition(other).String(), 2); err != nil {
				return "", nil, err
			}
		}
		owners, err := r.PartitionOwners(ctx, topic)
		if err != nil {
			return "", nil, err
		}
		seen := map[int]bool{}
		for _, o := range owners {
			seen[o.N] = true
		}
		if !seen[1] || !seen[2] {
			if !move { // a bundle changed owner between the check and now: another name
				continue
			}
			return "", nil, fmt.Errorf("rig: partitions of %s (bundle %s and another) did not land on both brokers", topic, first)
		}
		return topic, owners, nil
	}
	return "", nil, fmt.Errorf("rig: no topic name with %d partitions spanning two bundles found", partitions)
}

// twoBundles returns partition 0's bundle and the first partition whose bundle differs (-1
// when every partition hashes to partition 0's).
func (r *Rig) twoBundles(ctx context.Context, tn TopicName, partitions int) (string, int, error) {
	first, err := r.TopicBundle(ctx, tn.Partition(0).String())
	if err != nil {
		return "", -1, err
	}
	for i := 1; i < partitions; i++ {
		b, err := r.TopicBundle(ctx, tn.Partition(i).String())
		if err != nil {
			return "", -1, err
		}
		if b != first {
			return first, i, nil
		}
	}
	return first, -1, nil
}

// ownedApart reports whether topics a and b are owned by different brokers now (a lookup
// assigns a bundle no broker owns yet; it moves none).
func (r *Rig) ownedApart(ctx context.Context, a, b string) (bool, error) {
	oa, err := r.TopicOwner(ctx, a)
	if err != nil {
		return false, err
	}
	ob, err := r.TopicOwner(ctx, b)
	if err != nil {
		return false, err
	}
	return oa.N != ob.N, nil
}
