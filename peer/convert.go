package peer

import (
	"time"

	"github.com/cmfs-project/cmfs/api/containerpb"
	"github.com/cmfs-project/cmfs/container"
)

func descToPB(d container.Descriptor) *containerpb.Descriptor {
	var created int64
	if !d.Created.IsZero() {
		created = d.Created.UnixNano()
	}
	return &containerpb.Descriptor{
		Id:                 d.ID,
		State:              containerpb.State(containerpb.State_value[string(d.State)]),
		ChecksumType:       d.ChecksumType,
		ReplicaIndex:       int32(d.ReplicaIndex),
		Replication:        d.Replication,
		Bytes:              d.Bytes,
		Blocks:             d.Blocks,
		MaxSize:            d.MaxSize,
		CreatedUnixNano:    created,
		ContainerChecksum:  d.ContainerChecksum,
		DescriptorChecksum: d.DescriptorChecksum,
		Reason:             d.Reason,
		Chunks:             int32(d.Chunks),
		MetadataBytes:      d.MetadataBytes,
		MetadataChecksum:   d.MetadataChecksum,
		LayoutVersion:      int32(d.LayoutVersion),
	}
}

func descFromPB(p *containerpb.Descriptor) container.Descriptor {
	if p == nil {
		return container.Descriptor{}
	}
	d := container.Descriptor{
		ID:                 p.Id,
		ChecksumType:       p.ChecksumType,
		ReplicaIndex:       int(p.ReplicaIndex),
		Replication:        p.Replication,
		Bytes:              p.Bytes,
		Blocks:             p.Blocks,
		MaxSize:            p.MaxSize,
		ContainerChecksum:  p.ContainerChecksum,
		DescriptorChecksum: p.DescriptorChecksum,
		Reason:             p.Reason,
		Chunks:             int(p.Chunks),
		MetadataBytes:      p.MetadataBytes,
		MetadataChecksum:   p.MetadataChecksum,
		LayoutVersion:      int(p.LayoutVersion),
	}
	if p.State != containerpb.State_STATE_UNSPECIFIED {
		d.State = container.State(p.State.String())
	}
	if p.CreatedUnixNano != 0 {
		d.Created = time.Unix(0, p.CreatedUnixNano).UTC()
	}
	return d
}

func modeToPB(m Mode) containerpb.Mode {
	switch m {
	case Pull:
		return containerpb.Mode_PULL
	case NodeDefault:
		return containerpb.Mode_NODE_DEFAULT
	}
	return containerpb.Mode_PUSH
}

func modeFromPB(m containerpb.Mode) Mode {
	switch m {
	case containerpb.Mode_PULL:
		return Pull
	case containerpb.Mode_NODE_DEFAULT:
		return NodeDefault
	}
	return Push
}

func blockToPB(b container.BlockID) *containerpb.BlockID {
	return &containerpb.BlockID{Sum: b.Sum, Size: b.Size}
}

func blockFromPB(p *containerpb.BlockID) container.BlockID {
	if p == nil {
		return container.BlockID{Size: -1}
	}
	return container.BlockID{Sum: p.Sum, Size: p.Size}
}
