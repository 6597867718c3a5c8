#!/usr/bin/env bash
# Runs inside the LocalStack container once it is ready (ready.d hook). Prepares what a burst
# node group needs on EC2 and says plainly what the community edition cannot do.
set -euo pipefail
export AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}"

vpc=$(awslocal ec2 create-vpc --cidr-block 10.42.0.0/16 \
  --tag-specifications 'ResourceType=vpc,Tags=[{Key=controller,Value=burst-ctl}]' \
  --query Vpc.VpcId --output text)
subnet=$(awslocal ec2 create-subnet --vpc-id "$vpc" --cidr-block 10.42.1.0/24 \
  --availability-zone "${AWS_DEFAULT_REGION}a" \
  --tag-specifications 'ResourceType=subnet,Tags=[{Key=controller,Value=burst-ctl}]' \
  --query Subnet.SubnetId --output text)
awslocal ssm put-parameter --name /gpu-burst/munge-key --type SecureString \
  --value "$(head -c 32 /dev/urandom | base64)" --overwrite >/dev/null

echo "gpu-burst: VPC $vpc, private subnet $subnet, munge key in SSM /gpu-burst/munge-key"
echo "gpu-burst: GPU instance types offered here:"
awslocal ec2 describe-instance-type-offerings \
  --filters Name=instance-type,Values=p4d.24xlarge,p5.48xlarge,g5.xlarge,g6.xlarge \
  --query 'InstanceTypeOfferings[].InstanceType' --output text | tr '\t' '\n' | sort -u

if awslocal autoscaling describe-auto-scaling-groups >/dev/null 2>&1; then
  echo "gpu-burst: EC2 Auto Scaling is available (LocalStack Pro?)"
else
  echo "gpu-burst: EC2 Auto Scaling is NOT available in LocalStack community;"
  echo "           node groups (ASGs) cannot be created here. Use moto (the test suite does)."
fi
