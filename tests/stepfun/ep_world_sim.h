// A world of N ranks in one process for the EP planning tests: each rank's NCCL group of
// send/recv ops (dispatch_plan.h schedules) is matched with its peers' the way NCCL matches
// point-to-point calls (the i-th send from r to p meets the i-th receive on p from r, and their
// sizes must agree) and carried out with memcpy. Also: row and expert slices of host tensors.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <vector>

#include "cakemoe/tensor.h"
#include "stepfun/ep/dispatch_plan.h"

namespace cakemoe {
namespace stepfun {
namespace ep {
namespace sim {

/// One rank's buffers by P2pOp::field: where its sends read and its receives write.
struct RankBuffers {
  std::map<int, uint8_t*> send;
  std::map<int, uint8_t*> recv;
  std::map<int, int64_t> send_bytes;  ///< sizes, to check that every op stays inside
  std::map<int, int64_t> recv_bytes;
};

/// Runs one group per rank (ops[r] on rank r). Fails the test on an unmatched or mismatched op.
inline void run_groups(const std::vector<std::vector<P2pOp>>& ops,
                       const std::vector<RankBuffers>& buffers) {
  const int world = static_cast<int>(ops.size());
  for (int r = 0; r < world; ++r) {
    for (int p = 0; p < world; ++p) {
      std::vector<P2pOp> sends, recvs;
      for (const P2pOp& op : ops[r]) {
        if (op.send && op.peer == p) sends.push_back(op);
      }
      for (const P2pOp& op : ops[p]) {
        if (!op.send && op.peer == r) recvs.push_back(op);
      }
      ASSERT_EQ(sends.size(), recvs.size()) << "sends " << r << "->" << p;
      for (size_t i = 0; i < sends.size(); ++i) {
        const P2pOp& s = sends[i];
        const P2pOp& v = recvs[i];
        ASSERT_EQ(s.field, v.field) << "op " << i << " " << r << "->" << p;
        ASSERT_EQ(s.bytes, v.bytes) << "op " << i << " " << r << "->" << p;
        ASSERT_LE(s.offset_bytes + s.bytes, buffers[r].send_bytes.at(s.field));
        ASSERT_LE(v.offset_bytes + v.bytes, buffers[p].recv_bytes.at(v.field));
        std::memcpy(buffers[p].recv.at(v.field) + v.offset_bytes,
                    buffers[r].send.at(s.field) + s.offset_bytes, static_cast<size_t>(s.bytes));
      }
    }
  }
}

/// Rows [start, start + count) of a contiguous tensor (dim 0).
inline TensorView row_slice(const TensorView& t, int64_t start, int64_t count) {
  if (!t.defined()) return TensorView();
  TensorView v = t;
  const int64_t row_bytes = static_cast<int64_t>(t.nbytes()) / t.shape[0];
  v.data = static_cast<uint8_t*>(t.data) + start * row_bytes;
  v.shape[0] = count;
  return v;
}

}  // namespace sim
}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
