package rig

import (
	"context"
	"fmt"
)

// CreateSpreadPartitionedTopic creates a partitioned topic (a unique name from prefix) whose
// partitions are owned by both brokers: partition 0 is placed on broker 1 and the first
// partition that hashes to another bundle on broker 2. Names whose partitions all hash to one
// bundle are skipped. It returns the topic and each partition's owner.
func (r *Rig) CreateSpreadPartitionedTopic(ctx context.Context, prefix string, partitions int) (string, []Broker, error) {
	for attempt := 0; attempt < 10; attempt++ {
		topic := "persistent://public/default/" + UniqueName(prefix)
		tn, err := ParseTopic(topic)
		if err != nil {
			return "", nil, err
		}
		first, err := r.TopicBundle(ctx, tn.Partition(0).String())
		if err != nil {
			return "", nil, err
		}
		other := -1
		for i := 1; i < partitions && other < 0; i++ {
			b, err := r.TopicBundle(ctx, tn.Partition(i).String())
			if err != nil {
				return "", nil, err
			}
			if b != first {
				other = i
			}
		}
		if other < 0 {
			continue
		}
		if err := r.CreatePartitionedTopic(ctx, topic, partitions); err != nil {
			return "", nil, err
		}
		if err := r.PlaceTopic(ctx, tn.Partition(0).String(), 1); err != nil {
			return "", nil, err
		}
		if err := r.PlaceTopic(ctx, tn.Partition(other).String(), 2); err != nil {
			return "", nil, err
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
			return "", nil, fmt.Errorf("rig: partitions of %s did not land on both brokers", topic)
		}
		return topic, owners, nil
	}
	return "", nil, fmt.Errorf("rig: no topic name with %d partitions spanning two bundles found", partitions)
}
