package nemesis

import (
	"encoding/binary"
	"syscall"
	"testing"
)

// packetMsg builds an NFQNL_MSG_PACKET netlink message carrying packet id.
func packetMsg(id uint32) []byte {
	hdr := binary.BigEndian.AppendUint32(nil, id)
	hdr = append(hdr, 0x08, 0x00, 3) // hw protocol, hook
	body := []byte{syscall.AF_INET, 0, 0, 1}
	body = append(body, nlAttr(9, []byte{1, 2, 3, 4})...) // an attribute before the header
	body = append(body, nlAttr(nfqaPacketHdr, hdr)...)
	msg := make([]byte, syscall.NLMSG_HDRLEN)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)+len(body)))
	binary.NativeEndian.PutUint16(msg[4:], nfnlSubsysQueue<<8|nfqnlMsgPacket)
	return append(msg, body...)
}

func TestPacketIDs(t *testing.T) {
	buf := append(packetMsg(7), packetMsg(0xdeadbeef)...)
	got := packetIDs(buf, nil)
	if len(got) != 2 || got[0] != 7 || got[1] != 0xdeadbeef {
		t.Fatalf("ids %v", got)
	}
	if got := packetIDs([]byte{1, 2, 3}, nil); len(got) != 0 {
		t.Fatalf("garbage gave %v", got)
	}
}

func TestNLAttrPadding(t *testing.T) {
	a := nlAttr(5, []byte{1, 2, 3, 4, 5})
	if len(a) != 12 || binary.NativeEndian.Uint16(a) != 9 || binary.NativeEndian.Uint16(a[2:]) != 5 {
		t.Fatalf("attr %v", a)
	}
}
