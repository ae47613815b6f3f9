// Communicators as ops on simulated streams (see streamed_communicator.h).
#include "executor/cpu/cuda_semantics/streamed_communicator.h"

#include <stdexcept>
#include <string>

#include "executor/comm/group_streams.h"

namespace strata::cuda_semantics {
namespace {

Access reads(const void* p, std::int64_t n, DType t) { return Access{p, n * dtype_bytes(t), false}; }
Access writes(const void* p, std::int64_t n, DType t) { return Access{p, n * dtype_bytes(t), true}; }

SimStream link_stream(GroupStream kind, int index) {
  if (index < 0 || index >= kLinkStreamsPerDirection) {
    throw std::invalid_argument("cuda semantics: no stream for pipeline link " + std::to_string(index));
  }
  if (kind == GroupStream::kLinkSend) {
    return index == 0 ? SimStream::kLinkSend0 : SimStream::kLinkSend1;
  }
  return index == 0 ? SimStream::kLinkRecv0 : SimStream::kLinkRecv1;
}

// A send or receive's completion, as NCCL's: the host waits for an event recorded on the
// communicator's stream after the operation, so it then knows that stream's work so far.
class StreamRequest final : public Request::Impl {
 public:
  StreamRequest(Request inner, SimStream stream, StreamScheduler& scheduler)
      : inner_(std::move(inner)), stream_(stream), scheduler_(&scheduler) {}
  void wait() override {
    inner_.wait();
    scheduler_->host_wait(stream_);
  }
  void wait_noexcept() noexcept override { Request done = std::move(inner_); }

 private:
  Request inner_;
  SimStream stream_;
  StreamScheduler* scheduler_;
};

}  // namespace

void StreamedCommunicator::refuse_in_capture(const char* op) const {
  // Their requests are host objects a graph cannot hold: pipelined plans are not captured.
  if (scheduler_->capturing()) {
    throw StreamRace(std::string("cuda semantics: a pipeline ") + op +
                     " during stream capture; this mode captures no point-to-point message");
  }
}

void StreamedCommunicator::do_all_reduce_sum(void* data, std::int64_t n, DType dtype) {
  scheduler_->run_now(stream_, "all_reduce_sum", {reads(data, n, dtype), writes(data, n, dtype)},
                      [=, this] { inner_->all_reduce_sum(data, n, dtype); });
}

void StreamedCommunicator::do_all_reduce_max(void* data, std::int64_t n, DType dtype) {
  scheduler_->run_now(stream_, "all_reduce_max", {reads(data, n, dtype), writes(data, n, dtype)},
                      [=, this] { inner_->all_reduce_max(data, n, dtype); });
}

void StreamedCommunicator::do_reduce_scatter_sum(const void* in, void* out, std::int64_t n,
                                              DType dtype) {
  scheduler_->run_now(stream_, "reduce_scatter_sum",
                      {reads(in, n * size(), dtype), writes(out, n, dtype)},
                      [=, this] { inner_->reduce_scatter_sum(in, out, n, dtype); });
}

void StreamedCommunicator::do_all_gather(const void* in, void* out, std::int64_t n, DType dtype) {
  scheduler_->run_now(stream_, "all_gather", {reads(in, n, dtype), writes(out, n * size(), dtype)},
                      [=, this] { inner_->all_gather(in, out, n, dtype); });
}

void StreamedCommunicator::do_broadcast(void* data, std::int64_t n, DType dtype, int root) {
  scheduler_->run_now(stream_, "broadcast", {reads(data, n, dtype), writes(data, n, dtype)},
                      [=, this] { inner_->broadcast(data, n, dtype, root); });
}

Request StreamedCommunicator::do_send(const void* data, std::int64_t n, DType dtype, int peer,
                                   int tag) {
  refuse_in_capture("send");
  Request request;
  scheduler_->run_now(stream_, "send", {reads(data, n, dtype)},
                      [&] { request = inner_->send(data, n, dtype, peer, tag); });
  return Request(std::make_unique<StreamRequest>(std::move(request), stream_, *scheduler_));
}

void StreamedCommunicator::do_recv(void* data, std::int64_t n, DType dtype, int peer, int tag) {
  refuse_in_capture("recv");
  scheduler_->run_now(stream_, "recv", {writes(data, n, dtype)},
                      [&] { inner_->recv(data, n, dtype, peer, tag); });
  if (!scheduler_->running()) scheduler_->host_wait(stream_);
}

Request StreamedCommunicator::do_irecv(void* data, std::int64_t n, DType dtype, int peer, int tag) {
  refuse_in_capture("irecv");
  Request request;
  scheduler_->run_now(stream_, "irecv", {writes(data, n, dtype)},
                      [&] { request = inner_->irecv(data, n, dtype, peer, tag); });
  return Request(std::make_unique<StreamRequest>(std::move(request), stream_, *scheduler_));
}

void StreamedCommunicator::barrier() {
  synchronize();
  inner_->barrier();
}

void StreamedCommunicator::synchronize() {
  if (!scheduler_->running()) scheduler_->host_wait(stream_);
}

std::unique_ptr<Communicator> StreamedCommunicatorFactory::split(GroupKind kind, int color,
                                                                 int key) {
  std::unique_ptr<Communicator> inner = host_->split(kind, color, key);
  if (!inner) return nullptr;
  const int link = links_.next(kind);
  SimStream stream = SimStream::kComm;
  switch (group_stream(kind)) {
    case GroupStream::kCompute: stream = SimStream::kCompute; break;
    case GroupStream::kComm: stream = SimStream::kComm; break;
    case GroupStream::kP2p: stream = SimStream::kP2p; break;
    case GroupStream::kLinkSend: stream = link_stream(GroupStream::kLinkSend, link); break;
    case GroupStream::kLinkRecv: stream = link_stream(GroupStream::kLinkRecv, link); break;
  }
  return std::make_unique<StreamedCommunicator>(std::move(inner), stream, *scheduler_);
}

}  // namespace strata::cuda_semantics
