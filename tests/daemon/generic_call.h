// \file
// One unary gRPC call by method name through the generic stub, for services whose generated
// stubs lathe does not build (health, reflection): the tuner's auth tests and the e2e security
// tests both knock on them with and without a token.
#ifndef LATHE_TESTS_DAEMON_GENERIC_CALL_H_
#define LATHE_TESTS_DAEMON_GENERIC_CALL_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace lathe::testing {

// Calls `method` on `address` (plain text) with the serialized `request` and, when `token` is
// not empty, "authorization: Bearer <token>"; its status, and the serialized reply in
// `response` when given and the call succeeded.
inline grpc::Status GenericCall(const std::string& address, const std::string& method,
                                const std::string& request, const std::string& token,
                                std::string* response = nullptr) {
  grpc::GenericStub stub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  grpc::CompletionQueue cq;
  grpc::Slice slice(request);
  grpc::ByteBuffer req(&slice, 1), resp;
  auto call = stub.PrepareUnaryCall(&ctx, method, req, &cq);
  call->StartCall();
  grpc::Status st;
  call->Finish(&resp, &st, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  EXPECT_TRUE(cq.Next(&tag, &ok));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (st.ok() && response != nullptr) {
    std::vector<grpc::Slice> slices;
    (void)resp.Dump(&slices);
    response->clear();
    for (const grpc::Slice& s : slices) {
      response->append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  return st;
}

}  // namespace lathe::testing

#endif  // LATHE_TESTS_DAEMON_GENERIC_CALL_H_
